// The sgemmlab visualizer: draws window.SGEMMLAB (data.js, schema sgemmlab.visual/1, written
// by `sgemmlab visualize`). Every address, sector, bank and owned element comes from the
// replay of the kernel's own index arithmetic (anatomy/visual.py); this file only lays it out.
// Everything lives in one object, window.viz, so tests (and the console) can drive it.
"use strict";

(function () {
  let D = window.SGEMMLAB;  // or window.SGEMMLAB_SEED: setConfiguration
  const NS = "http://www.w3.org/2000/svg";
  // Okabe-Ito, without black (black marks the selected lane).
  const PALETTE = ["#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00",
                   "#CC79A7"];
  const SECTOR_FLOATS = 8;  // a 32-byte sector holds 8 floats of one row
  const BANKS = 32;
  const MAX_CELLS = 128;    // ownership: group elements beyond 128 x 128 cells
  const PLAY_MS = 350;

  const $ = (id) => document.getElementById(id);
  const state = { rung: 0, warp: 0, lane: 0, instr: 0, k: 0, ktile: 0, sk: 0, timer: null,
                  bx: 0, by: 0 };

  function svg(tag, attrs, parent) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (parent) parent.appendChild(e);
    return e;
  }
  function figure(w, h, label, extra) {
    // an SVG at its natural size (CSS scales it down to fit, never up)
    return svg("svg", { viewBox: `0 0 ${w} ${h}`, width: w, height: h, role: "img",
                        "aria-label": label, ...extra });
  }
  function text(x, y, s, attrs, parent) {
    const t = svg("text", { x, y, ...attrs }, parent);
    t.textContent = s;
    return t;
  }
  function html(tag, attrs, content) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (content !== undefined) e.textContent = content;
    return e;
  }
  const fmt = (x, d = 2) => (Number.isInteger(x) ? String(x) : Number(x).toFixed(d));
  const big = (x) => Number(x).toLocaleString("en-US");
  const warpColour = (w) => PALETTE[w % PALETTE.length];
  const rung = () => D.rungs[state.rung];
  const instr = () => rung().instructions[state.instr];
  const tid = () => state.warp * 32 + state.lane;
  // The chosen block's tile origin in C (the kernel's blockIdx arithmetic: rows along
  // gridDim.y, or along x for rows_on_x), and the element offset that moves the replayed
  // block's (0, 0) accesses there: A's rows, B's columns, C's both. Tiles are whole sectors
  // wide, so every sector count is the replayed block's.
  function origin() {
    const r = rung();
    const [rows, cols] = r.tile;
    return r.rows_on_x ? [state.bx * rows, state.by * cols] : [state.by * rows, state.bx * cols];
  }
  function shift(ins) {
    if (ins.space !== "global") return 0;
    const [row0, col0] = origin();
    return ins.operand === "A" ? row0 * ins.ld : ins.operand === "B" ? col0
      : row0 * ins.ld + col0;
  }
  function lanesOf(ins) {
    const d = shift(ins);
    return d ? ins.lanes.map((e) => (e < 0 ? e : e + d)) : ins.lanes;
  }

  // ---- the header: tabs and the rungs not replayed -------------------------------------

  function buildTabs() {
    const tabs = $("tabs");
    D.rungs.forEach((r, i) => {
      const b = html("button", { type: "button", role: "tab", id: "tab-" + r.number,
                                 "aria-selected": "false", "aria-controls": "views",
                                 "data-rung": r.number, title: r.title },
                     r.number + " " + r.name);
      b.addEventListener("click", () => select(i));
      tabs.appendChild(b);
    });
    const off = $("not-replayed");
    if (D.not_replayed.length) {
      off.appendChild(html("span", { class: "off-label" }, "not replayed:"));
    }
    for (const r of D.not_replayed) {
      const chip = html("span", { class: "chip off", "aria-disabled": "true",
                                  title: r.title + " — " + r.why, "data-label": r.label },
                        r.label.replace("_", " "));
      off.appendChild(chip);
    }
    if (D.not_replayed.length) {
      off.appendChild(html("span", { class: "off-why" },
                           "(" + D.not_replayed[0].why.split(":")[0] + ": bills in headers)"));
    }
  }

  // ---- selection -----------------------------------------------------------------------

  function select(i) {
    state.rung = Math.max(0, Math.min(D.rungs.length - 1, i));
    const r = rung();
    document.querySelectorAll("#tabs [role=tab]").forEach((b, j) => {
      b.setAttribute("aria-selected", String(j === state.rung));
      b.tabIndex = j === state.rung ? 0 : -1;
    });
    state.warp = Math.min(state.warp, r.warps - 1);
    state.k = 0;
    state.ktile = 0;
    state.sk = 0;
    $("warp").max = r.warps - 1;
    const sel = $("instruction");
    sel.textContent = "";
    const groups = { false: html("optgroup", { label: "one K step" }),
                     true: html("optgroup", { label: "epilogue" }) };
    for (const ins of r.instructions) {
      const place = ins.space === "shared" ? "shared" : "global";
      groups[ins.epilogue].appendChild(html("option", { value: ins.index },
        "#" + ins.index + " " + ins.operand + " " + ins.kind + " (" + place + ", "
        + ins.width + " B/lane)"));
    }
    for (const g of Object.values(groups)) if (g.children.length) sel.appendChild(g);
    const sk = $("streamk-shape");
    sk.textContent = "";
    (r.pipeline.streamk || []).forEach((p, j) => {
      sk.appendChild(html("option", { value: j }, p.shape.join(" x ")));
    });
    state.instr = 0;
    const bx = $("block-x"), by = $("block-y");
    bx.max = r.grid[0] - 1;
    by.max = r.grid[1] - 1;
    bx.disabled = by.disabled = r.persistent;
    $("block-note").textContent = r.persistent
      ? "persistent: each block walks tiles (the pipeline view)"
      : `of ${r.grid[0]} × ${r.grid[1]}`;
    state.bx = r.persistent ? 0 : Math.min(state.bx, r.grid[0] - 1);
    state.by = r.persistent ? 0 : Math.min(state.by, r.grid[1] - 1);
    bx.value = state.bx;
    by.value = state.by;
    renderSide();
    renderOwnershipBase();
    setInstruction(0);
  }

  function setWarp(n) {
    state.warp = Math.max(0, Math.min(rung().warps - 1, n));
    render();
  }
  function setLane(n) {
    state.lane = Math.max(0, Math.min(31, n));
    render();
  }
  function setInstruction(i) {
    state.instr = Math.max(0, Math.min(rung().instructions.length - 1, i));
    renderGlobalBase();
    render();
  }
  function setBlock(x, y) {
    const r = rung();
    state.bx = r.persistent ? 0 : Math.max(0, Math.min(r.grid[0] - 1, x));
    state.by = r.persistent ? 0 : Math.max(0, Math.min(r.grid[1] - 1, y));
    $("block-x").value = state.bx;
    $("block-y").value = state.by;
    renderOwnershipBase();
    renderGlobalBase();
    render();
  }
  function setStreamK(j) {
    state.sk = j;
    renderStreamK();
  }
  function step() {
    state.k += 1;
    if (state.k >= rung().bk) {
      state.k = 0;
      state.ktile += 1;
    }
    renderRegisters();
    renderRing();
  }
  function playing() { return state.timer !== null; }
  function play() {
    if (!playing()) state.timer = setInterval(step, PLAY_MS);
    syncPlay();
  }
  function pause() {
    if (playing()) clearInterval(state.timer);
    state.timer = null;
    syncPlay();
  }
  function syncPlay() {
    $("play").textContent = playing() ? "Pause k" : "Play k";
    $("play").setAttribute("aria-pressed", String(playing()));
  }

  function render() {
    $("warp").value = state.warp;
    $("lane").value = state.lane;
    $("warp-value").textContent = state.warp;
    $("lane-value").textContent = state.lane;
    $("instruction").value = state.instr;
    renderOwnership();
    renderGlobal();
    renderShared();
    renderRegisters();
    renderRing();
    renderStreamK();
  }

  // ---- ownership: the block's tile of C, coloured by warp ------------------------------

  let own = null;  // per rung: the grouping and the warp of each cell

  function renderOwnershipBase() {
    const r = rung();
    const [rows, cols] = r.tile;
    const g = Math.max(1, Math.ceil(Math.max(rows, cols) / MAX_CELLS));
    const gr = Math.ceil(rows / g), gc = Math.ceil(cols / g);
    const cell = Math.max(3, Math.min(22, 460 / gc, 290 / gr));
    const warpOf = new Int32Array(gr * gc).fill(-1);
    r.owned.forEach((els, t) => {
      for (const [i, j] of els) warpOf[Math.floor(i / g) * gc + Math.floor(j / g)] = t >> 5;
    });
    const pad = 26;
    const root = figure(gc * cell + pad + 2, gr * cell + pad + 2,
                        `C tile ${rows} x ${cols} by warp`);
    const base = svg("g", { transform: `translate(${pad},${pad})` }, root);
    for (let i = 0; i < gr; i++) {
      for (let j = 0; j < gc; j++) {
        const w = warpOf[i * gc + j];
        svg("rect", { x: j * cell, y: i * cell, width: cell, height: cell, class: "own",
                      fill: w < 0 ? "#eee" : warpColour(w), "data-warp": w }, base);
      }
    }
    const [row0, col0] = origin();
    axes(root, pad, cell, gr, gc, g, row0, col0);
    own = { g, gr, gc, cell, pad, root, overlay: svg("g", {
      transform: `translate(${pad},${pad})` }, root) };
    const fig = $("own-figure");
    fig.textContent = "";
    fig.appendChild(root);
  }

  function axes(root, pad, cell, gr, gc, g, row0, col0) {
    // row and column numbers of C every few cells (the chosen block's), so a reader can
    // name an element
    const every = Math.max(1, Math.ceil(28 / cell));
    for (let j = 0; j < gc; j += every * 2) {
      text(pad + j * cell + cell / 2, pad - 6, col0 + j * g,
           { class: "axis", "text-anchor": "middle", "data-col": col0 + j * g }, root);
    }
    for (let i = 0; i < gr; i += every) {
      text(pad - 3, pad + i * cell + cell / 2 + 3, row0 + i * g,
           { class: "axis", "text-anchor": "end", "data-row": row0 + i * g }, root);
    }
  }

  function renderOwnership() {
    const r = rung();
    const { g, gc, cell, overlay } = own;
    overlay.textContent = "";
    const group = (i, j) => Math.floor(i / g) * gc + Math.floor(j / g);
    const mine = new Set();
    for (let l = 0; l < 32; l++) {
      const t = state.warp * 32 + l;
      if (t >= r.threads) break;
      for (const [i, j] of r.owned[t]) mine.add(group(i, j));
    }
    const lane = new Set((r.owned[tid()] || []).map(([i, j]) => group(i, j)));
    own.root.classList.toggle("dim", true);
    for (const c of mine) {
      const i = Math.floor(c / gc), j = c % gc;
      svg("rect", { x: j * cell, y: i * cell, width: cell, height: cell,
                    class: cell >= 8 ? "own-warp framed" : "own-warp",
                    fill: warpColour(state.warp), "data-owned": lane.has(c) ? "lane" : "warp" },
          overlay);
    }
    if (mine.size) {
      // the selected warp's extent, outlined: the highlight does not rest on colour alone
      const is = [...mine].map((c) => Math.floor(c / gc)), js = [...mine].map((c) => c % gc);
      const i0 = Math.min(...is), j0 = Math.min(...js);
      svg("rect", { x: j0 * cell - 1, y: i0 * cell - 1, class: "own-extent",
                    width: (Math.max(...js) - j0 + 1) * cell + 2,
                    height: (Math.max(...is) - i0 + 1) * cell + 2 }, overlay);
    }
    for (const c of lane) {
      const i = Math.floor(c / gc), j = c % gc;
      // the lane's cells: a black frame and a cross, so they read without colour
      svg("rect", { x: j * cell + 1, y: i * cell + 1, width: cell - 2, height: cell - 2,
                    class: "own-lane" }, overlay);
      svg("path", { d: `M${j * cell + 2},${i * cell + 2}l${cell - 4},${cell - 4}`
                       + `M${j * cell + cell - 2},${i * cell + 2}l${4 - cell},${cell - 4}`,
                    class: "own-cross" }, overlay);
    }
    const [rows, cols] = r.tile;
    const n = (r.owned[tid()] || []).length;
    const [row0, col0] = origin();
    $("own-text").textContent = `Block (${state.bx}, ${state.by}): C[${row0}..${row0 + rows - 1}]`
      + `[${col0}..${col0 + cols - 1}]. C tile ${rows} × ${cols} per block (${r.threads} threads, `
      + `${r.warps} warps; colour = warp, faded = other warps)`
      + (g > 1 ? `; one cell = ${g} × ${g} elements` : "")
      + `. Thread ${tid()} (warp ${state.warp}, lane ${state.lane}, crossed) writes ${n} `
      + `element${n === 1 ? "" : "s"}.`;
    $("own-text").dataset.lanes = n;
  }

  // ---- global memory: the block's footprint, the warp's lanes and sectors --------------

  let glob = null;  // per instruction: the window on the operand's matrix

  function floats(ins) { return ins.width / 4; }

  function renderGlobalBase() {
    const ins = instr();
    const fig = $("global-figure");
    fig.textContent = "";
    glob = null;
    if (ins.space !== "global") return;
    const fl = floats(ins), ld = ins.ld;
    const lanes = lanesOf(ins);
    let r0 = Infinity, r1 = -1, c0 = Infinity, c1 = -1;
    for (const e of lanes) {
      if (e < 0) continue;
      const i = Math.floor(e / ld), j = e % ld;
      r0 = Math.min(r0, i); r1 = Math.max(r1, i);
      c0 = Math.min(c0, j); c1 = Math.max(c1, j + fl - 1);
    }
    // widen to whole sectors, so the floats a sector moves but nobody uses are visible
    c0 = Math.floor(c0 / SECTOR_FLOATS) * SECTOR_FLOATS;
    c1 = Math.ceil((c1 + 1) / SECTOR_FLOATS) * SECTOR_FLOATS - 1;
    const rows = r1 - r0 + 1, cols = c1 - c0 + 1;
    const ch = Math.max(1.5, Math.min(24, 280 / rows));
    const cw = Math.max(1.5, Math.min(24, 470 / cols, 4 * ch));
    const pad = 30;
    const root = figure(Math.max(420, cols * cw + pad + 4), rows * ch + pad + 4,
                        `${ins.operand} footprint`);
    const g = svg("g", { transform: `translate(${pad},${pad})` }, root);
    svg("rect", { x: 0, y: 0, width: cols * cw, height: rows * ch, class: "gbox" }, g);
    const seen = new Set();
    for (const e of lanes) {
      if (e < 0) continue;
      for (let f = 0; f < fl; f++) {
        if (seen.has(e + f)) continue;
        seen.add(e + f);
        const i = Math.floor((e + f) / ld) - r0, j = ((e + f) % ld) - c0;
        svg("rect", { x: j * cw, y: i * ch, width: cw, height: ch, class: "gblock" }, g);
      }
    }
    text(pad, 11, `${ins.operand}[${r0}..${r1}][${c0}..${c1}]  (ld = ${ld}; rows down, `
         + "columns across)", { class: "axis" }, root);
    text(pad - 3, pad + ch / 2 + 3, r0, { class: "axis", "text-anchor": "end" }, root);
    text(pad, pad - 4, c0, { class: "axis" }, root);
    glob = { r0, c0, cw, ch, root, overlay: svg("g", { transform: `translate(${pad},${pad})` },
                                              root) };
    fig.appendChild(root);
  }

  function renderGlobal() {
    const r = rung(), ins = instr();
    const out = $("global-bytes");
    delete out.dataset.sectors;
    if (ins.space !== "global") {
      out.textContent = `Instruction #${ins.index} is a shared-memory ${ins.kind} of `
        + `${ins.operand}: nothing moves to or from global memory here (see the shared-memory `
        + "view). Pick a load or store of A, B or C.";
      return;
    }
    const { r0, c0, cw, ch, overlay } = glob;
    overlay.textContent = "";
    const fl = floats(ins), ld = ins.ld;
    const sectors = new Map();  // sector id -> [row, first col]
    const starts = new Map();   // first element -> the lanes that load from it (broadcast)
    const shifted = lanesOf(ins);
    for (let l = 0; l < 32; l++) {
      const e = shifted[state.warp * 32 + l];
      if (e === undefined || e < 0) continue;
      if (!starts.has(e)) starts.set(e, []);
      starts.get(e).push(l);
      for (let s = Math.floor(e / SECTOR_FLOATS); s <= Math.floor((e + fl - 1) / SECTOR_FLOATS);
        s++) {
        const first = s * SECTOR_FLOATS;
        sectors.set(s, [Math.floor(first / ld) - r0, (first % ld) - c0]);
      }
    }
    // the selected lane last, so its frame is drawn over its neighbours
    const order = [...starts].sort((x, y) => x[1].includes(state.lane) - y[1].includes(state.lane));
    for (const [e, lanes] of order) {
      const i = Math.floor(e / ld) - r0, j = (e % ld) - c0;
      const selected = lanes.includes(state.lane);
      svg("rect", { x: j * cw, y: i * ch, width: fl * cw, height: ch,
                    class: selected ? "glane sel" : "glane", fill: warpColour(state.warp),
                    "data-lane": lanes.join(" ") }, overlay);
      if (ch >= 9 && fl * cw >= 14) {
        const label = lanes.length > 1 ? `${lanes[0]}+${lanes.length - 1}` : String(lanes[0]);
        text(j * cw + fl * cw / 2, i * ch + ch * 0.72, label,
             { class: "lane-label", "text-anchor": "middle" }, overlay);
      }
    }
    for (const [s, [i, j]] of sectors) {
      svg("rect", { x: j * cw, y: i * ch, width: SECTOR_FLOATS * cw, height: ch,
                    class: "sector", "data-sector": s }, overlay);
    }
    const w = ins.warps[state.warp];
    const moved = w.sectors * 32;
    out.textContent = `#${ins.index} ${ins.operand} ${ins.kind}, ${ins.width} B per lane. `
      + `Warp ${state.warp}: ${w.active} lanes request ${w.bytes} B; they touch `
      + `${w.sectors} sectors × 32 B = ${moved} B moved, `
      + `${fmt(w.bytes ? moved / w.bytes : 0)} bytes moved per useful byte. `
      + `The rung's bill: ${fmt(r.bill.global_sector_bytes_per_warp)} B of sectors per warp `
      + "per K step, all global instructions together. (Grey: what the whole block touches; "
      + `dashed frames: the warp's sectors; thick frame: lane ${state.lane}.)`;
    out.dataset.sectors = w.sectors;
    out.dataset.bytes = w.bytes;
    out.dataset.bill = r.bill.global_sector_bytes_per_warp;
  }

  // ---- shared memory: the warp's words over the 32 banks, phase by phase ---------------

  function phases(ins) {
    // lanes per phase: the hardware serves 128 bytes per wavefront
    const per = { 4: 32, 8: 16, 16: 8 }[ins.width];
    const out = [];
    for (let p = 0; p < 32; p += per) {
      const lanes = [];
      for (let l = p; l < p + per; l++) {
        const word = ins.lanes[state.warp * 32 + l];
        if (word !== undefined && word >= 0) lanes.push([l, word]);
      }
      if (lanes.length) out.push(lanes);
    }
    return out;
  }

  function renderShared() {
    const ins = instr();
    const out = $("shared-wavefronts");
    const fig = $("shared-figure");
    fig.textContent = "";
    delete out.dataset.wavefronts;
    if (ins.space !== "shared") {
      out.textContent = `Instruction #${ins.index} is a global ${ins.kind} of ${ins.operand}: `
        + "it touches no shared-memory bank (see the global-memory view). Pick an As or Bs "
        + "access.";
      return;
    }
    const fl = floats(ins);
    const cell = 14, top = 40, left = 72, bandGap = 8;
    const bands = [];
    let wavefronts = 0;
    for (const lanes of phases(ins)) {
      const words = new Map();  // word -> lanes touching it
      for (const [l, w0] of lanes) {
        for (let f = 0; f < fl; f++) {
          if (!words.has(w0 + f)) words.set(w0 + f, []);
          words.get(w0 + f).push(l);
        }
      }
      const perBank = new Array(BANKS).fill(0);
      for (const w of words.keys()) perBank[w % BANKS] += 1;
      wavefronts += Math.max(...perBank);
      const rows = [...new Set([...words.keys()].map((w) => Math.floor(w / BANKS)))]
        .sort((a, b) => a - b);
      bands.push({ lanes, words, perBank, rows });
    }
    const height = top + bands.reduce((h, b) => h + (b.rows.length + 1) * cell + bandGap, 0);
    const root = figure(left + BANKS * cell + 4, height, "shared-memory banks");
    text(left, 11, "bank (word % 32) →; one row = 32 words; number = lane", { class: "axis" },
         root);
    for (let b = 0; b < BANKS; b += 4) {
      text(left + b * cell + cell / 2, top - 6, b, { class: "axis", "text-anchor": "middle" },
           root);
    }
    let y = top;
    bands.forEach((band, p) => {
      text(2, y + cell * 0.75, `phase ${p}`, { class: "axis strong" }, root);
      text(left - 3, y + cell * 0.75, "×", { class: "replay", "text-anchor": "end" }, root);
      band.rows.forEach((row, i) => {
        text(left - 3, y + (i + 1) * cell + cell * 0.72, `row ${row}`,
             { class: "axis", "text-anchor": "end" }, root);
      });
      // the replay count over each conflicting bank
      band.perBank.forEach((n, b) => {
        if (n > 1) {
          text(left + b * cell + cell / 2, y + cell * 0.75, n,
               { class: "replay", "text-anchor": "middle", "data-replay": n }, root);
        }
      });
      for (const [w, lanes] of band.words) {
        const b = w % BANKS, i = band.rows.indexOf(Math.floor(w / BANKS));
        const conflict = band.perBank[b] > 1;
        const attrs = { x: left + b * cell, y: y + (i + 1) * cell, width: cell, height: cell,
                        class: conflict ? "bank conflict" : "bank",
                        fill: warpColour(state.warp), "data-word": w };
        if (conflict) attrs["data-conflict"] = band.perBank[b];
        const mine = lanes.includes(state.lane);
        svg("rect", attrs, root);
        if (mine) {
          // the selected lane's words: an inner white-and-black frame, on top of any conflict
          svg("rect", { x: attrs.x + 2, y: attrs.y + 2, width: cell - 4, height: cell - 4,
                        class: "bank-sel", "data-lane": state.lane }, root);
        }
        const label = lanes.length > 1 ? lanes[0] + "+" : String(lanes[0]);
        text(left + b * cell + cell / 2, y + (i + 1) * cell + cell * 0.72, label,
             { class: mine ? "bank-label sel" : "bank-label", "text-anchor": "middle" }, root);
      }
      y += (band.rows.length + 1) * cell + bandGap;
    });
    fig.appendChild(root);
    const w = ins.warps[state.warp];
    const ways = w.phases ? w.wavefronts / w.phases : 0;
    out.textContent = `#${ins.index} ${ins.operand} ${ins.kind}, ${ins.width} B per lane `
      + `(${{ 4: 32, 8: 16, 16: 8 }[ins.width]} lanes per phase). Warp ${state.warp}: ${w.wavefronts} wavefronts for ${w.phases} `
      + `phase${w.phases === 1 ? "" : "s"}: `
      + (ways > 1 ? `${fmt(ways)}-way conflict (thick outline: a bank holding several words of `
                     + "one phase; the × row: its replays)." : "no conflict.")
      + ` Framed: lane ${state.lane}.`
      + ` The rung's bill: ${fmt(rung().bill.smem_wavefronts_per_warp)} wavefronts per warp `
      + "per K step.";
    out.dataset.wavefronts = w.wavefronts;
    out.dataset.phases = w.phases;
    out.dataset.drawn = wavefronts;  // the page's own count, the same rule as bill.wavefronts
  }

  // ---- registers: the selected thread's accumulators, filled one k at a time -----------

  function renderRegisters() {
    const r = rung();
    const els = r.owned[tid()] || [];
    const rows = [...new Set(els.map((e) => e[0]))].sort((a, b) => a - b);
    const cols = [...new Set(els.map((e) => e[1]))].sort((a, b) => a - b);
    const fig = $("regs-figure");
    fig.textContent = "";
    const k = state.k, done = k + 1;
    $("k-counter").textContent = `k = ${k} of 0..${r.bk - 1} in K step ${state.ktile} `
      + `(one K step covers ${r.bk} k). Thread ${tid()} holds ${els.length} accumulators; `
      + `at k it adds A[row][k] × B[k][col] to each: ${r.ffma_per_thread} FFMA per thread per K `
      + `step. Each shows the products this K step has added (${done}); over the whole sum `
      + `${state.ktile * r.bk + done}.`;
    $("k-counter").dataset.k = k;
    $("k-counter").dataset.ktile = state.ktile;
    if (!els.length) return;
    const cell = Math.max(14, Math.min(24, Math.floor(420 / (cols.length + 1)),
                                       Math.floor(230 / (rows.length + 1))));
    const left = 44, top = 30;
    const root = figure(Math.max(260, left + (cols.length + 1) * cell + 4),
                        top + (rows.length + 1) * cell + 4, "accumulators");
    text(left + cell, 11, `B[${k}][col] (a row of Bs) →`, { class: "axis" }, root);
    cols.forEach((c, j) => {
      svg("rect", { x: left + (j + 1) * cell, y: top, width: cell, height: cell, class: "vecB" },
          root);
      text(left + (j + 1) * cell + cell / 2, top + cell * 0.68, c,
           { class: "tiny", "text-anchor": "middle" }, root);
    });
    text(2, top + cell * 0.7, "A[row][k]", { class: "axis" }, root);
    rows.forEach((rw, i) => {
      svg("rect", { x: left, y: top + (i + 1) * cell, width: cell, height: cell, class: "vecA" },
          root);
      text(left + cell / 2, top + (i + 1) * cell + cell * 0.68, rw,
           { class: "tiny", "text-anchor": "middle" }, root);
    });
    const have = new Set(els.map(([a, b]) => a + "," + b));
    rows.forEach((rw, i) => cols.forEach((c, j) => {
      if (!have.has(rw + "," + c)) return;
      const x = left + (j + 1) * cell, y = top + (i + 1) * cell;
      svg("rect", { x, y, width: cell, height: cell, class: "acc", "data-acc": done,
                    "fill-opacity": 0.15 + 0.85 * done / r.bk }, root);
      text(x + cell / 2, y + cell * 0.68, done, { class: "tiny", "text-anchor": "middle" }, root);
    }));
    fig.appendChild(root);
  }

  // ---- pipeline: the ring of stages, and rung 14's Stream-K ranges ---------------------

  function renderRing() {
    const r = rung();
    const fig = $("ring-figure");
    fig.textContent = "";
    const stages = r.pipeline.stages;
    if (!stages) {
      $("pipe-text").textContent = "No multi-stage ring in this rung: one k-tile sits in shared "
        + "memory at a time (load it, sync, compute on it, sync)"
        + (r.config.PREFETCH ? "; the next tile's loads are issued into registers early "
           + "(PREFETCH)." : ".");
      return;
    }
    const t = state.ktile;
    $("pipe-text").textContent = `${stages} stages: while k-tile ${t} is computed from slot `
      + `${t % stages}, the copies of k-tiles ${t + 1}..${t + stages - 1} are in flight into the `
      + "other slots (step or play k to advance).";
    const box = 92, gap = 26;
    const root = figure(Math.max(320, stages * (box + gap) + 40), box * 0.62 + 30,
                        "pipeline ring");
    for (let slot = 0; slot < stages; slot++) {
      const s = ((slot - t) % stages + stages) % stages;  // how far ahead this slot's tile is
      const x = 10 + slot * (box + gap);
      const role = s === 0 ? "computing" : s === stages - 1 ? "loading" : "in flight";
      svg("rect", { x, y: 8, width: box, height: box * 0.55, rx: 6,
                    class: "stage " + role.replace(" ", "-"), "data-stage": slot,
                    "data-ktile": t + s }, root);
      text(x + box / 2, 26, `slot ${slot}`, { class: "axis", "text-anchor": "middle" }, root);
      text(x + box / 2, 42, `k-tile ${t + s}`, { class: "strong", "text-anchor": "middle" }, root);
      text(x + box / 2, 56, role, { class: "axis", "text-anchor": "middle" }, root);
      if (slot < stages - 1) {
        text(x + box + gap / 2, 38, "→", { class: "axis", "text-anchor": "middle" }, root);
      }
    }
    text(10, box * 0.55 + 26, "the last slot wraps to slot 0: a ring", { class: "axis" }, root);
    fig.appendChild(root);
  }

  // runtime/streamk.plan's Stream-K branch (SPLIT = 0), for a shape the reader types: the
  // whole tiles in full waves but the last one or two, whose k-tiles are cut into equal
  // ranges over the blocks, none shorter than min_ktiles (a browser test checks it against
  // the Python for many shapes)
  function planStreamK(M, N, K) {
    const r = rung();
    const { BM, BN, BK } = r.config;
    const { slots: G, min_ktiles: minK } = r.pipeline.streamk_rule;
    const cdiv = (a, b) => Math.floor((a + b - 1) / b);
    const T = cdiv(M, BM) * cdiv(N, BN), KT = cdiv(K, BK);
    const waves = Math.floor(T / G), rest = T % G;
    let dp, sk, skBlocks, grid;
    if (rest === 0) {
      [dp, sk, skBlocks, grid] = [T, 0, 0, G];
    } else {
      dp = Math.max(waves - 1, 0) * G;
      sk = T - dp;
      skBlocks = Math.max(1, Math.min(G, Math.floor(sk * KT / minK)));
      grid = Math.max(Math.min(dp, G), skBlocks);
    }
    const total = sk * KT;
    const ranges = [];
    for (let b = 0; b < skBlocks; b++) {
      ranges.push([Math.floor(total * b / skBlocks), Math.floor(total * (b + 1) / skBlocks)]);
    }
    let describe;
    if (!sk) {
      describe = `${dp} whole tiles on ${grid} persistent blocks`;
    } else {
      const head = dp ? `${dp} whole tiles, then ` : "";
      describe = `${head}${sk} tiles x ${KT} k-tiles streamed over ${skBlocks} blocks `
        + `(${(total / skBlocks).toFixed(1)} k-tiles each), grid ${grid}`;
    }
    return { shape: [M, N, K], grid, tiles: T, dp_tiles: dp, sk_tiles: sk,
             sk_blocks: skBlocks, k_tiles: KT, ranges, describe, typed: true };
  }

  function addStreamK(M, N, K) {
    const plans = rung().pipeline.streamk;
    if (!plans || ![M, N, K].every((v) => Number.isInteger(v) && v >= 1)) return null;
    plans.push(planStreamK(M, N, K));
    const j = plans.length - 1;
    $("streamk-shape").appendChild(html("option", { value: j }, [M, N, K].join(" x ")
                                        + " (typed)"));
    setStreamK(j);
    return plans[j];
  }

  function renderStreamK() {
    const r = rung();
    const plans = r.pipeline.streamk;
    $("streamk").hidden = !plans;
    if (!plans) return;
    const p = plans[state.sk];
    $("streamk-shape").value = state.sk;
    $("streamk-describe").textContent = `${p.shape.join(" × ")}: ${p.describe}. `
      + `${p.tiles} tiles of C, ${p.dp_tiles} whole (data-parallel), ${p.sk_tiles} streamed `
      + `over ${p.sk_blocks} blocks.`;
    const fig = $("streamk-figure");
    fig.textContent = "";
    if (!p.ranges.length) {
      fig.appendChild(html("p", { class: "note" },
                           "No streaming blocks for this shape: every tile is computed whole."));
      return;
    }
    const total = p.sk_tiles * p.k_tiles;
    const width = 900, left = 50, bar = Math.max(2, Math.min(10, 264 / p.ranges.length));
    const height = 22 + p.ranges.length * bar + 14;
    const root = figure(left + width + 10, height, "Stream-K ranges", { class: "streamk" });
    const x = (kt) => left + width * kt / total;
    // tile boundaries every k_tiles of the stream
    const every = Math.max(1, Math.ceil(p.sk_tiles / 150));
    for (let tile = 0; tile <= p.sk_tiles; tile += every) {
      svg("line", { x1: x(tile * p.k_tiles), x2: x(tile * p.k_tiles), y1: 18, y2: height - 12,
                    class: "tile-edge" }, root);
    }
    text(left, 12, `the stream: ${p.sk_tiles} tiles × ${p.k_tiles} k-tiles = ${big(total)} `
         + "k-tiles (grey lines: tile boundaries); one bar per streaming block",
         { class: "axis" }, root);
    p.ranges.forEach(([a, b], i) => {
      svg("rect", { x: x(a), y: 20 + i * bar, width: Math.max(1, x(b) - x(a)),
                    height: Math.max(1, bar - 1), fill: PALETTE[i % PALETTE.length],
                    class: "sk-bar", "data-sk-block": i,
                    "aria-label": `block ${i}: k-tiles ${a} to ${b}` }, root);
    });
    text(left - 4, 20 + bar, "0", { class: "axis", "text-anchor": "end" }, root);
    text(left - 4, 20 + p.ranges.length * bar, p.ranges.length - 1,
         { class: "axis", "text-anchor": "end" }, root);
    fig.appendChild(root);
  }

  // ---- the side panel ------------------------------------------------------------------

  function table(rows) {
    const t = html("table");
    for (const [k, v] of rows) {
      const tr = html("tr");
      tr.appendChild(html("th", { scope: "row" }, k));
      tr.appendChild(html("td", {}, v));
      t.appendChild(tr);
    }
    return t;
  }

  function renderSide() {
    const r = rung(), b = r.bill;
    const side = $("side");
    side.textContent = "";
    side.appendChild(html("h2", { id: "side-title" }, `Rung ${r.number}: ${r.title}`));
    side.appendChild(html("p", { class: "src" }, `kernels/${r.source}`));
    const head = html("div", { class: "header-lines" });
    for (const line of r.header) head.appendChild(html("p", {}, line));
    side.appendChild(head);

    const m = r.measured;
    const meas = html("p", { id: "measured" });
    if (m) {
      meas.textContent = `H200 at ${D.shape.join("×")}: ${fmt(m.median_us / 1000, 2)} ms, `
        + `${fmt(100 * m.vs_cublas, 1)}% of cuBLAS`
        + (m.tflops ? `, ${fmt(m.tflops, 1)} TFLOP/s` : "")
        + (m.registers ? `, ${m.registers} registers` : "") + ` (${m.file})`;
      meas.dataset.pct = (100 * m.vs_cublas).toFixed(1);
    } else {
      meas.textContent = `H200 at ${D.shape.join("×")}: not measured`;
    }
    side.appendChild(meas);
    if (r.python) {  // the Python track's twin: the same index arithmetic, so this replay
      const p = r.python, pm = p.measured;
      side.appendChild(html("p", { id: "python-twin" },
        `Python twin: ${p.label} (${p.file}), the same index arithmetic in Numba; `
        + (pm ? `H200: ${fmt(pm.median_us / 1000, 2)} ms, ${fmt(100 * pm.vs_cublas, 1)}% of `
          + `cuBLAS, ${fmt(pm.over_twin, 2)}× this rung's time (${pm.file})`
          : "H200: not measured")));
    }

    side.appendChild(html("h3", {}, "Configuration"));
    side.appendChild(html("p", { class: "config" },
      Object.entries(r.config).map(([k, v]) => `${k}=${v}`).join("  ")));
    side.appendChild(table([
      ["threads / warps", `${r.threads} / ${r.warps} (block ${r.block.join("×")})`],
      ["tile of C", `${r.tile[0]} × ${r.tile[1]}, ${r.bk} k per K step`],
      ["FFMA per thread", `${r.ffma_per_thread} per K step`],
    ]));

    side.appendChild(html("h3", {}, "The bill (per warp per K step)"));
    side.appendChild(table([
      ["global sector bytes", fmt(b.global_sector_bytes_per_warp)],
      ["smem loads per FFMA", fmt(b.smem_loads_per_ffma, 3)],
      ["LDS per FFMA", fmt(b.lds_per_ffma, 3)],
      ["smem wavefronts", fmt(b.smem_wavefronts_per_warp)],
      ["intensity (FLOP/B)", fmt(b.intensity)],
      ["block bytes requested / distinct",
       `${big(b.block_bytes_requested)} / ${big(b.block_bytes_distinct)}`],
      ["DRAM bytes (model) / minimal",
       `${(b.dram_bytes / 1e9).toFixed(2)} GB / ${(b.minimal_dram_bytes / 1e9).toFixed(2)} GB`],
      ["copy instructions", Object.entries(b.copy_instructions || {})
        .map(([k, v]) => `${k} ${fmt(v)}`).join(", ")],
    ]));

    side.appendChild(html("h3", {}, "Occupancy (H200)"));
    const o = r.occupancy;
    side.appendChild(html("p", { id: "occupancy" }, o
      ? `${o.blocks} block${o.blocks === 1 ? "" : "s"} per SM (${o.warps} of ${o.max_warps} warps, `
        + `${fmt(100 * o.fraction, 0)}%); limited by ${(o.limits || []).join(", ")}`
      : "no model: registers unknown (not measured)"));
  }

  // ---- controls and keys ---------------------------------------------------------------

  // the H200's default configurations, or the seed's (the original articles': rung 1's
  // 32 x 32 blocks move 1056 bytes per warp and k, rung 2's 160)
  function setConfiguration(name) {
    const next = name === "seed" ? window.SGEMMLAB_SEED : window.SGEMMLAB;
    if (!next) return;
    D = next;
    window.viz.data = D;
    $("configuration").value = name === "seed" ? "seed" : "default";
    select(state.rung);
  }

  function wire() {
    $("configuration").addEventListener("change", (e) => setConfiguration(e.target.value));
    $("block-x").addEventListener("change", (e) => setBlock(Number(e.target.value), state.by));
    $("sk-add").addEventListener("click", () => addStreamK(
      Number($("sk-m").value), Number($("sk-n").value), Number($("sk-k").value)));
    $("block-y").addEventListener("change", (e) => setBlock(state.bx, Number(e.target.value)));
    $("warp").addEventListener("input", (e) => setWarp(Number(e.target.value)));
    $("lane").addEventListener("input", (e) => setLane(Number(e.target.value)));
    $("instruction").addEventListener("change", (e) => setInstruction(Number(e.target.value)));
    $("streamk-shape").addEventListener("change", (e) => setStreamK(Number(e.target.value)));
    $("play").addEventListener("click", () => (playing() ? pause() : play()));
    $("step").addEventListener("click", () => { pause(); step(); });
    document.addEventListener("keydown", (e) => {
      if (e.ctrlKey || e.metaKey || e.altKey) return;
      const tag = e.target.tagName;
      if (tag === "SELECT" && (e.key === "ArrowUp" || e.key === "ArrowDown")) return;
      const keys = {
        ArrowLeft: () => setLane(state.lane - 1),
        ArrowRight: () => setLane(state.lane + 1),
        ArrowUp: () => setWarp(state.warp + 1),
        ArrowDown: () => setWarp(state.warp - 1),
        "[": () => setInstruction(state.instr - 1),
        "]": () => setInstruction(state.instr + 1),
        " ": () => (playing() ? pause() : play()),
      };
      if (keys[e.key]) {
        e.preventDefault();
        keys[e.key]();
      }
    });
  }

  function start() {
    if (!D || D.schema !== "sgemmlab.visual/1") {
      document.body.textContent = "No data: data.js is missing or of another schema. Write the "
        + "site with `sgemmlab visualize --out DIR` and open DIR/index.html.";
      return;
    }
    $("where").textContent = `— ${D.gpu}, M×N×K = ${D.shape.join("×")}`;
    buildTabs();
    wire();
    select(0);
  }

  window.viz = { data: D, state, select, setWarp, setLane, setInstruction, setStreamK, step,
                 play, pause, tid, setConfiguration, setBlock, origin, planStreamK,
                 addStreamK };
  start();
})();
