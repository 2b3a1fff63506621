"""The visualizer page in a real browser: Selenium 4 drives headless Chromium over the site
`sgemmlab visualize` writes, opened from file:// (no server, no network).

Every expected number comes from the site's own data.js, read here in Python, so a test
fails when the page draws something other than the replay. Skipped cleanly where Chromium,
chromedriver or selenium is missing (CI installs them: `apt-get install chromium
chromium-driver`, `pip install -e .[dev]`)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from sgemmlab import registry
from sgemmlab.anatomy import visual
from sgemmlab.bench.results import visualizer_measurements

REPO = Path(__file__).resolve().parent.parent
WIDTH, HEIGHT = 1366, 768  # the laptop screen the page is laid out for


def _binary(env: str, *names: str) -> str | None:
    for name in (os.environ.get(env), *names):
        if name and (found := shutil.which(name)):
            return found
    return None


CHROMIUM = _binary("SGEMMLAB_CHROMIUM", "/usr/bin/chromium", "chromium", "chromium-browser")
CHROMEDRIVER = _binary("SGEMMLAB_CHROMEDRIVER", "/usr/bin/chromedriver", "chromedriver")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """(the site's folder, its data as Python) — built once for the module."""
    out = tmp_path_factory.mktemp("visualizer")
    page = visual.write_site(out, list(registry.RUNGS),
                             visualizer_measurements("nvidia-h200", root=REPO / "results"))
    return page, visual_data(out)["SGEMMLAB"]


def visual_data(folder: Path) -> dict:
    """The assignments of data.js (window.SGEMMLAB, window.SGEMMLAB_SEED) as Python."""
    out = {}
    for line in (folder / "data.js").read_text().splitlines():
        name, _, value = line.partition(" = ")
        out[name.removeprefix("window.")] = json.loads(value.rstrip().rstrip(";"))
    return out


@pytest.fixture(scope="module")
def browser(site):
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("needs Chromium and chromedriver (apt-get install chromium chromium-driver)")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM  # with the driver's path: Selenium Manager stays idle
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={WIDTH},{HEIGHT}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    # the viewport itself, not the window around it, is 1366 x 768
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1,
                            "mobile": False})
    driver.get(site[0].resolve().as_uri())
    yield driver
    driver.quit()


@pytest.fixture
def page(browser):
    """The page back at rung 1, warp 0, lane 0, the first instruction, not playing."""
    browser.execute_script("viz.pause(); viz.setConfiguration('default'); viz.setLane(0); "
                           "viz.setWarp(0); viz.select(0); viz.setBlock(0, 0);")
    return browser


def css(driver, selector):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def by_id(driver, ident):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, ident)


def rung_index(data, number):
    return next(i for i, r in enumerate(data["rungs"]) if r["number"] == number)


def first(rung, **want):
    return next(x for x in rung["instructions"] if all(x[k] == v for k, v in want.items()))


def test_the_page_loads_with_no_script_errors(browser, site):
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
    assert browser.execute_script("return typeof window.viz.select") == "function"
    assert browser.execute_script("return window.SGEMMLAB.schema") == visual.SCHEMA


def test_every_rung_has_a_tab_and_the_tab_sets_the_side_panel(page, site):
    data = site[1]
    tabs = css(page, "#tabs [role=tab]")
    assert [t.get_attribute("data-rung") for t in tabs] == [
        str(r["number"]) for r in data["rungs"]]
    assert [r["number"] for r in data["rungs"]] == list(range(1, 15))
    for tab, rung in zip(tabs, data["rungs"]):
        tab.click()
        assert tab.get_attribute("aria-selected") == "true"
        assert rung["title"] in by_id(page, "side-title").text
    assert len(css(page, "#tabs [aria-selected=true]")) == 1
    off = css(page, "#not-replayed .chip.off")
    assert [c.get_attribute("data-label") for c in off] == [
        r["label"] for r in data["not_replayed"]]
    assert all(c.get_attribute("aria-disabled") == "true" for c in off)


def test_coalescing_rung_1_moves_more_sector_bytes_than_rung_2(page, site):
    data = site[1]
    shown = {}
    for number in (1, 2):
        i = rung_index(data, number)
        rung = data["rungs"][i]
        ins = first(rung, operand="A", kind="load", space="global")
        page.execute_script(f"viz.select({i}); viz.setInstruction({ins['index']});")
        w = ins["warps"][0]
        out = by_id(page, "global-bytes")
        assert int(out.get_attribute("data-sectors")) == w["sectors"]
        assert len(css(page, "#view-global [data-sector]")) == w["sectors"]
        assert f"{w['sectors'] * 32} B moved" in out.text
        assert f"{rung['bill']['global_sector_bytes_per_warp']:g} B of sectors" in out.text
        shown[number] = (w["sectors"], rung["bill"]["global_sector_bytes_per_warp"])
    # the famous story: one warp of rung 1 touches a sector per row of A, rung 2 one in all
    assert shown[1][0] > shown[2][0]
    assert shown[1][1] > shown[2][1]
    # and every global access of both rungs outlines the sectors the replay counted
    for number in (1, 2):
        i = rung_index(data, number)
        for ins in data["rungs"][i]["instructions"]:
            page.execute_script(f"viz.select({i}); viz.setInstruction({ins['index']});")
            assert len(css(page, "#view-global [data-sector]")) == ins["warps"][0]["sectors"]


def test_a_bank_conflict_is_outlined_and_counted(page, site):
    data = site[1]
    i = rung_index(data, 6)
    rung = data["rungs"][i]
    ins, warp = next((x, w) for x in rung["instructions"] if x["space"] == "shared"
                     for w, wf in enumerate(x["warps"]) if wf["wavefronts"] > wf["phases"])
    page.execute_script(f"viz.select({i}); viz.setWarp({warp}); "
                        f"viz.setInstruction({ins['index']});")
    w = ins["warps"][warp]
    out = by_id(page, "shared-wavefronts")
    assert int(out.get_attribute("data-wavefronts")) == w["wavefronts"]
    assert int(out.get_attribute("data-drawn")) == w["wavefronts"]  # the page's own count
    assert f"{w['wavefronts'] // w['phases']}-way conflict" in out.text
    assert css(page, "#view-shared [data-conflict]")
    assert css(page, "#view-shared [data-replay]")
    # a conflict-free shared access draws no conflict
    clean = next(x for x in rung["instructions"] if x["space"] == "shared"
                 and all(wf["wavefronts"] == wf["phases"] for wf in x["warps"]))
    page.execute_script(f"viz.setInstruction({clean['index']});")
    assert "no conflict" in by_id(page, "shared-wavefronts").text
    assert not css(page, "#view-shared [data-conflict]")


def test_a_view_that_does_not_apply_says_so(page, site):
    rung = site[1]["rungs"][rung_index(site[1], 6)]
    shared = first(rung, space="shared")
    page.execute_script(f"viz.select({rung_index(site[1], 6)}); "
                        f"viz.setInstruction({shared['index']});")
    assert "shared-memory" in by_id(page, "global-bytes").text
    assert not css(page, "#view-global [data-sector]")
    page.execute_script(f"viz.setInstruction({first(rung, space='global')['index']});")
    assert "no shared-memory bank" in by_id(page, "shared-wavefronts").text


def cells(driver):
    return {(c.get_attribute("x"), c.get_attribute("y"))
            for c in css(driver, '#view-ownership [data-owned="lane"]')}


def test_the_lane_slider_moves_the_lanes_owned_cells(page, site):
    data = site[1]
    i = rung_index(data, 6)  # a 64 x 128 tile: one cell per element, no grouping
    rung = data["rungs"][i]
    page.execute_script(f"viz.select({i});")
    before = cells(page)
    assert len(before) == len(rung["owned"][0])
    page.execute_script("const s = document.getElementById('lane'); s.value = 5; "
                        "s.dispatchEvent(new Event('input'));")
    after = cells(page)
    assert by_id(page, "lane-value").text == "5"
    assert len(after) == len(rung["owned"][5])
    assert after != before


def test_keys_move_lane_warp_instruction_and_play(page):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    page.execute_script("viz.select(5);")
    by_id(page, "side").click()  # the focus away from any control
    keys = ActionChains(page)
    keys.send_keys(Keys.ARROW_RIGHT, Keys.ARROW_RIGHT, Keys.ARROW_UP, "]").perform()
    state = page.execute_script("return [viz.state.lane, viz.state.warp, viz.state.instr]")
    assert state == [2, 1, 1]
    assert by_id(page, "lane").get_attribute("value") == "2"
    ActionChains(page).send_keys(Keys.ARROW_LEFT, "[").perform()
    assert page.execute_script("return [viz.state.lane, viz.state.instr]") == [1, 0]
    ActionChains(page).send_keys(Keys.SPACE).perform()
    assert by_id(page, "play").get_attribute("aria-pressed") == "true"
    ActionChains(page).send_keys(Keys.SPACE).perform()
    assert by_id(page, "play").get_attribute("aria-pressed") == "false"


def test_step_and_play_advance_k(page, site):
    data = site[1]
    i = rung_index(data, 6)
    rung = data["rungs"][i]
    page.execute_script(f"viz.select({i});")
    counter = by_id(page, "k-counter")
    assert counter.get_attribute("data-k") == "0"
    by_id(page, "step").click()
    assert counter.get_attribute("data-k") == "1"
    accs = css(page, "#view-registers [data-acc]")
    assert len(accs) == len(rung["owned"][0])
    assert {a.get_attribute("data-acc") for a in accs} == {"2"}
    assert str(rung["ffma_per_thread"]) in counter.text
    by_id(page, "play").click()
    deadline = time.time() + 5
    while counter.get_attribute("data-k") == "1" and time.time() < deadline:
        time.sleep(0.05)
    by_id(page, "play").click()
    assert int(counter.get_attribute("data-k")) > 1


def test_the_ring_follows_the_k_tile(page, site):
    data = site[1]
    i = next(j for j, r in enumerate(data["rungs"]) if r["pipeline"]["stages"])
    stages = data["rungs"][i]["pipeline"]["stages"]
    page.execute_script(f"viz.select({i}); for (let n = 0; n < viz.data.rungs[{i}].bk; n++) "
                        "viz.step();")
    held = sorted(int(s.get_attribute("data-ktile"))
                  for s in css(page, "#view-pipeline [data-stage]"))
    assert held == list(range(1, 1 + stages))


def test_the_side_panel_shows_the_measurement_or_says_not_measured(page, site):
    for i, rung in enumerate(site[1]["rungs"]):
        page.execute_script(f"viz.select({i});")
        text = by_id(page, "measured").text
        m = rung["measured"]
        if m is None:
            assert "not measured" in text
        else:
            assert f"{100 * m['vs_cublas']:.1f}% of cuBLAS" in text
            assert Path(m["file"]).name in text.replace("\n", "")
    # a rung without a measurement (the data as visual.py writes it then) says so
    page.execute_script("viz.data.rungs[0].measured = null; viz.select(0);")
    assert "not measured" in by_id(page, "measured").text
    original = json.dumps(site[1]["rungs"][0]["measured"])
    page.execute_script(f"viz.data.rungs[0].measured = {original};")


def test_a_twin_of_a_python_rung_names_it_in_the_side_panel(page, site):
    from selenium.webdriver.common.by import By

    for i, rung in enumerate(site[1]["rungs"]):
        page.execute_script(f"viz.select({i});")
        twin = page.find_elements(By.ID, "python-twin")
        if rung["python"] is None:
            assert not twin, rung["label"]
            continue
        text = twin[0].text
        assert rung["python"]["label"] in text and rung["python"]["file"] in text
        pm = rung["python"]["measured"]
        assert (f"{100 * pm['vs_cublas']:.1f}% of cuBLAS" in text) if pm else \
            ("not measured" in text)


def test_streamk_draws_one_bar_per_streaming_block(page, site):
    from selenium.webdriver.support.select import Select

    data = site[1]
    i = rung_index(data, 14)
    page.execute_script(f"viz.select({i});")
    assert by_id(page, "streamk").is_displayed()
    plans = data["rungs"][i]["pipeline"]["streamk"]
    for j, plan in enumerate(plans):
        Select(by_id(page, "streamk-shape")).select_by_index(j)
        assert len(css(page, "#view-pipeline [data-sk-block]")) == len(plan["ranges"])
        assert plan["describe"] in by_id(page, "streamk-describe").text
    assert any(p["ranges"] for p in plans)
    page.execute_script("viz.select(0);")
    assert not by_id(page, "streamk").is_displayed()


def test_no_horizontal_scrollbar_at_1366_by_768(page, site):
    for i, rung in enumerate(site[1]["rungs"]):
        ins = first(rung, space="shared") if rung["bk"] > 1 else rung["instructions"][0]
        page.execute_script(f"viz.select({i}); viz.setInstruction({ins['index']});")
        width = page.execute_script("return [document.documentElement.scrollWidth, "
                                    "document.documentElement.clientWidth]")
        assert width[0] <= width[1], (rung["label"], width)


def test_a_screenshot_is_a_png(page, site, tmp_path_factory):
    i = rung_index(site[1], 6)
    page.execute_script(f"viz.select({i}); viz.setInstruction(1);")
    shot = tmp_path_factory.mktemp("shots") / "visualizer.png"
    assert page.save_screenshot(str(shot))
    raw = shot.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and len(raw) > 10_000


def test_at_the_seeds_configuration_rung_1_touches_33_sectors_and_rung_2_five(page, site):
    """The articles' story, per warp and step of k (rung 1 at BS = 32: a sector per row of A
    and one of B; rung 2: one of A, four of B), summed over the page's own figures."""
    seed = visual_data(site[0].parent)["SGEMMLAB_SEED"]
    page.execute_script("viz.setConfiguration('seed')")
    assert page.execute_script("return viz.data.configuration") == "seed"
    for number, sectors in ((1, 33), (2, 5)):
        i = rung_index(seed, number)
        rung = seed["rungs"][i]
        total = 0
        for ins in rung["instructions"]:
            if ins["space"] != "global" or ins["operand"] not in "AB" or ins["epilogue"]:
                continue
            page.execute_script(f"viz.select({i}); viz.setInstruction({ins['index']});")
            total += int(by_id(page, "global-bytes").get_attribute("data-sectors"))
        assert total == sectors
        assert rung["bill"]["global_sector_bytes_per_warp"] == 32 * sectors  # 1056, 160
        side = by_id(page, "side").text
        assert str(32 * sectors) in side.replace(",", "")  # the bill's line, as the page shows it


def test_a_block_is_the_replayed_one_shifted_to_its_tile(page, site):
    """Block (x, y) of rung 6 reads A's rows y*BM.. and B's columns x*BN.. with the same
    sectors (the kernel's blockIdx arithmetic); the persistent rung 14 has no block choice."""
    data = site[1]
    i = rung_index(data, 6)
    rung = data["rungs"][i]
    rows, cols = rung["tile"]
    page.execute_script(f"viz.select({i}); viz.setBlock(3, 2);")
    assert page.execute_script("return viz.origin()") == [2 * rows, 3 * cols]
    assert f"C[{2 * rows}.." in by_id(page, "own-text").text
    for operand, label in (("A", f"A[{2 * rows}.."), ("B", f"][{3 * cols}..")):
        ins = first(rung, operand=operand, kind="load", space="global")
        page.execute_script(f"viz.setInstruction({ins['index']});")
        assert label in by_id(page, "global-figure").text
        assert int(by_id(page, "global-bytes").get_attribute("data-sectors")) == \
            ins["warps"][0]["sectors"]
    assert css(page, f'#own-figure [data-row="{2 * rows}"]')
    j = rung_index(data, 14)
    page.execute_script(f"viz.select({j}); viz.setBlock(5, 5);")
    assert page.execute_script("return viz.origin()") == [0, 0]
    assert by_id(page, "block-x").get_attribute("disabled") is not None


@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (3000, 5000, 700), (1, 1, 1),
                                   (4097, 1023, 515), (8192, 8192, 512), (129, 131, 100003),
                                   (33000, 257, 64)])
def test_a_typed_shape_is_planned_as_the_launcher_plans_it(page, site, shape):
    from sgemmlab.runtime.decompose import streamk as plan

    data = site[1]
    i = rung_index(data, 14)
    cfg = data["rungs"][i]["config"]
    page.execute_script(f"viz.select({i});")
    for ident, v in zip(("sk-m", "sk-n", "sk-k"), shape):
        box = by_id(page, ident)
        box.clear()
        box.send_keys(str(v))
    by_id(page, "sk-add").click()
    got = page.execute_script("return viz.data.rungs[viz.state.rung].pipeline.streamk"
                              "[viz.state.sk]")
    want = plan(0, cfg["FIXUP"], cfg["BM"], cfg["BN"], cfg["BK"], *shape, 1, visual.H200_SLOTS)
    assert got["shape"] == list(shape)
    assert got["ranges"] == [list(r) for r in want.ranges()]
    assert got["describe"] == want.describe()
    assert len(css(page, "#view-pipeline [data-sk-block]")) == want.sk_blocks
