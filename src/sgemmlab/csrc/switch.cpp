// The drop-in switch's hot path, in C++ (sgemmlab/dropin/__init__.py has the whole story).
//
// torch's aten products — mm, addmm, bmm, baddbmm and their out= forms — are registered here
// as the CUDA kernels of those ops while a torch_mode is on. A call whose signature (op,
// shapes, strides, device, alignment, alpha, beta, precision) was served before runs from a
// recipe: the output allocated, the launches' packed arguments copied onto the stack with
// this call's pointers written in, and one cuLaunchKernel per launch (the bias fill, the
// product). No Python runs. Anything else — a new signature, an operand with the negative
// bit — asks Python once (`miss`), which serves the call on the same plans as
// sgemmlab.matmul and hands back the recipe for the next call of that signature; what
// sgemmlab does not serve (another dtype, TF32 allowed, shapes torch refuses, out= tensors
// torch would resize or that overlap an operand) goes to torch's own kernel, kept from
// before the registration.
//
// Why C++: torch's boxing of a Python kernel and one tensor allocation from Python cost
// about 9 µs per product on the H200's host, against 10 µs for torch's whole mm
// (results/nvidia-h200/host/switch-anatomy-*.json); here a product costs what torch's own does.
//
// The driver is reached through function pointers Python hands over (the libcuda.so.1 that
// cuda.bindings loaded): nothing here links against CUDA, so this file builds against any
// torch, CPU-only builds included (the CPU tests route through it with a stand-in launch).

#include <torch/extension.h>
#include <torch/library.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace py = pybind11;

namespace {

// ---------------------------------------------------------------------------------------
// The ops, the operands and the mode
// ---------------------------------------------------------------------------------------
enum Op : int { MM, MM_OUT, ADDMM, ADDMM_OUT, BMM, BMM_OUT, BADDBMM, BADDBMM_OUT, NOPS };
constexpr const char* kOpName[NOPS] = {"mm",  "mm.out",  "addmm",   "addmm.out",
                                       "bmm", "bmm.out", "baddbmm", "baddbmm.out"};
constexpr bool kAdds[NOPS] = {false, false, true, true, false, false, true, true};
constexpr bool kOut[NOPS] = {false, true, false, true, false, true, false, true};
constexpr int kDims[NOPS] = {2, 2, 2, 2, 3, 3, 3, 3};

// what fills a pointer slot of a launch (sgemmlab/dropin: A, B, OUT, X)
enum Operand : int { A = 0, B = 1, OUT = 2, X = 3 };

// the innermost mode's precision: -2 no mode, -1 follow torch, 0 "ieee", 1 "tf32x3",
// 2 "fp32_emulated" (dropin/__init__.py's _PRECISION_CODES)
std::atomic<int> g_precision{-2};
std::atomic<bool> g_deterministic{false};
std::array<std::atomic<int64_t>, NOPS> g_served{};
std::array<std::atomic<int64_t>, NOPS> g_passed{};

// ---------------------------------------------------------------------------------------
// The driver, as Python hands it over
// ---------------------------------------------------------------------------------------
using LaunchFn = int (*)(uint64_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, uint64_t, void**, void**);
using CapturingFn = int (*)(uint64_t, int*);
LaunchFn g_launch = nullptr;
CapturingFn g_capturing = nullptr;
constexpr int kInvalidContext = 201;  // CUDA_ERROR_INVALID_CONTEXT
constexpr int kCaptureActive = 1;     // CU_STREAM_CAPTURE_STATUS_ACTIVE

// Python's side: miss(op, x, a, b, out, beta, alpha) -> (result or None, recipe or None or
// "refuse"), and ready(device) (makes the device's primary context current on this thread)
py::object* g_miss = nullptr;
py::object* g_ready = nullptr;

// ---------------------------------------------------------------------------------------
// Recipes
// ---------------------------------------------------------------------------------------
constexpr int kMaxArgs = 32;

struct Launch {
  uint64_t kernel = 0;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  std::vector<uint64_t> cells;               // each argument's bytes, in 8
  std::vector<std::pair<int, int>> slots;    // (argument, Operand)
  std::vector<std::array<uint64_t, 3>> tail; // (argument, region 0 zeroed / 1 scratch, offset)
  uint64_t zeroed = 0, scratch = 0;          // the workspace it needs, in bytes
};

struct Recipe {
  bool refuse = false;  // sgemmlab refuses this signature: torch runs it, Python not asked
  std::vector<int64_t> shape;  // a new output's shape
  std::vector<Launch> launches;
  uint64_t zeroed = 0, scratch = 0;  // the largest workspace a launch needs
};

// A call's signature, as integers: 10 of the call, then up to 4 tensors of at most 3
// dimensions (1 + 2 x 3 each: `serve` checks the dimensions before it builds one).
struct Key {
  std::array<int64_t, 40> v{};
  int n = 0;
  void add(int64_t x) {
    TORCH_CHECK(n < static_cast<int>(v.size()), "sgemmlab: a call's key outgrew its array");
    v[n++] = x;
  }
  void add(const at::Tensor& t) {
    add(t.dim());
    for (int64_t i = 0; i < t.dim(); ++i) {
      add(t.size(i));
      add(t.stride(i));
    }
  }
  bool operator==(const Key& o) const {
    return n == o.n && std::memcmp(v.data(), o.v.data(), sizeof(int64_t) * n) == 0;
  }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < k.n; ++i) h = (h ^ static_cast<uint64_t>(k.v[i])) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

constexpr size_t kRecipeLimit = 4096;
std::mutex g_recipes_lock;
std::unordered_map<Key, std::shared_ptr<const Recipe>, KeyHash> g_recipes;

std::shared_ptr<const Recipe> find(const Key& k) {
  std::lock_guard<std::mutex> g(g_recipes_lock);
  auto it = g_recipes.find(k);
  return it == g_recipes.end() ? nullptr : it->second;
}

void keep(const Key& k, std::shared_ptr<const Recipe> r) {
  std::lock_guard<std::mutex> g(g_recipes_lock);
  if (g_recipes.size() >= kRecipeLimit) g_recipes.clear();
  g_recipes[k] = std::move(r);
}

template <class T>
T item(const py::handle& seq, size_t i) {
  return py::cast<T>(seq[py::int_(i)]);
}

std::shared_ptr<const Recipe> parse(const py::handle& obj) {
  auto r = std::make_shared<Recipe>();
  if (py::isinstance<py::str>(obj)) {
    r->refuse = true;
    return r;
  }
  r->shape = py::cast<std::vector<int64_t>>(obj[py::int_(0)]);
  for (const py::handle& l : obj[py::int_(1)]) {
    Launch L;
    L.kernel = item<uint64_t>(l, 0);
    auto grid = py::cast<std::vector<unsigned>>(l[py::int_(1)]);
    auto block = py::cast<std::vector<unsigned>>(l[py::int_(2)]);
    TORCH_CHECK(grid.size() == 3 && block.size() == 3, "sgemmlab: a recipe's grid and block have 3 sizes");
    std::copy(grid.begin(), grid.end(), L.grid);
    std::copy(block.begin(), block.end(), L.block);
    L.cells = py::cast<std::vector<uint64_t>>(l[py::int_(3)]);
    L.slots = py::cast<std::vector<std::pair<int, int>>>(l[py::int_(4)]);
    L.tail = py::cast<std::vector<std::array<uint64_t, 3>>>(l[py::int_(5)]);
    L.zeroed = item<uint64_t>(l, 6);
    L.scratch = item<uint64_t>(l, 7);
    size_t n = L.cells.size() + L.tail.size();
    TORCH_CHECK(n <= kMaxArgs, "sgemmlab: a launch of ", n, " arguments");
    for (auto& s : L.slots)
      TORCH_CHECK(s.first >= 0 && static_cast<size_t>(s.first) < L.cells.size() && s.second >= A &&
                      s.second <= X, "sgemmlab: a recipe's pointer slot is out of range");
    for (auto& t : L.tail)
      TORCH_CHECK(t[0] == L.cells.size() + (&t - L.tail.data()) && t[1] <= 1,
                  "sgemmlab: a recipe's workspace tail is out of order");
    r->zeroed = std::max(r->zeroed, L.zeroed);
    r->scratch = std::max(r->scratch, L.scratch);
    r->launches.push_back(std::move(L));
  }
  return r;
}

// ---------------------------------------------------------------------------------------
// Workspaces: one per (device, stream), zeroed region first (runtime/workspace.py's rules)
// ---------------------------------------------------------------------------------------
constexpr uint64_t kAlign = 256;
uint64_t round_up(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The stream's workspace is runtime/workspace.py's (cuda.core memory, outside torch's
// allocator: a CUDA-graph tree's memory pool must not see it), asked for through Python
// once per (device, stream) and again whenever that module replaces or frees a buffer
// (`bump`, which it calls on every change of its generation).
struct Space {
  uint64_t generation = ~0ull, zeroed_bytes = 0, scratch_bytes = 0, zeroed = 0, scratch = 0;
};
std::atomic<uint64_t> g_generation{0};
std::mutex g_spaces_lock;
std::unordered_map<uint64_t, Space> g_spaces;  // by device << 56 ^ stream handle
py::object* g_workspace = nullptr;  // workspace(device, stream, zeroed, scratch) -> pointers

// (zeroed, scratch) pointers for work on the current stream of `device`; `hold` keeps a
// capture's own buffer alive until its launches are enqueued
std::pair<uint64_t, uint64_t> workspace(const at::Device& device, uint64_t stream,
                                        uint64_t zeroed, uint64_t scratch, at::Tensor& hold) {
  int status = 0;
  if (stream > 1 && g_capturing != nullptr && g_capturing(stream, &status) == 0 &&
      status == kCaptureActive) {
    // a capture gets memory of its own from torch's allocator (the graph's pool), its
    // zeroed region cleared by a memset the graph replays (workspace.for_capture's rule)
    zeroed = std::max(round_up(zeroed), kAlign);
    scratch = round_up(scratch);
    auto opts = at::TensorOptions().dtype(at::kByte).device(device);
    hold = at::empty({static_cast<int64_t>(zeroed + scratch + kAlign)}, opts);
    uint64_t base = round_up(reinterpret_cast<uint64_t>(hold.data_ptr()));
    hold.narrow(0, base - reinterpret_cast<uint64_t>(hold.data_ptr()), zeroed).zero_();
    return {base, base + zeroed};
  }
  uint64_t key = (static_cast<uint64_t>(device.index()) << 56) ^ stream;
  uint64_t generation = g_generation.load();  // before asking: a change meanwhile asks again
  {
    std::lock_guard<std::mutex> g(g_spaces_lock);
    auto it = g_spaces.find(key);
    if (it != g_spaces.end() && it->second.generation == generation &&
        it->second.zeroed_bytes >= zeroed && it->second.scratch_bytes >= scratch)
      return {it->second.zeroed, it->second.scratch};
  }
  Space s;
  {
    py::gil_scoped_acquire gil;
    try {
      py::object got = (*g_workspace)(device.index(), stream, zeroed, scratch);
      s.zeroed = py::cast<uint64_t>(got[py::int_(0)]);
      s.scratch = py::cast<uint64_t>(got[py::int_(1)]);
    } catch (py::error_already_set& e) {
      std::string what = e.what();
      TORCH_CHECK(false, "sgemmlab's switch: ", what);
    }
  }
  s.generation = generation;
  s.zeroed_bytes = zeroed;
  s.scratch_bytes = scratch;
  std::lock_guard<std::mutex> g(g_spaces_lock);
  g_spaces[key] = s;
  return {s.zeroed, s.scratch};
}

// ---------------------------------------------------------------------------------------
// A call
// ---------------------------------------------------------------------------------------
struct Originals {
  std::optional<c10::OperatorHandle> op[NOPS];
  std::optional<c10::SafeKernelFunction> kernel[NOPS];
};
Originals* g_orig = nullptr;
std::unique_ptr<torch::Library> g_library;

// torch's own kernel for this call (the boxed stack holds the schema's arguments)
void pass(Op op, c10::DispatchKeySet ks, torch::jit::Stack& stack) {
  g_passed[op].fetch_add(1, std::memory_order_relaxed);
  g_orig->kernel[op]->callBoxed(*g_orig->op[op], ks, &stack);
}

std::pair<uint64_t, uint64_t> extent(const at::Tensor& t) {
  if (t.numel() == 0) return {0, 0};
  uint64_t start = reinterpret_cast<uint64_t>(t.data_ptr());
  int64_t last = 0;
  for (int64_t i = 0; i < t.dim(); ++i)
    if (t.size(i) > 1) last += (t.size(i) - 1) * t.stride(i);
  return {start, start + 4 * static_cast<uint64_t>(last + 1)};
}

bool overlap(const at::Tensor& c, const at::Tensor& x) {
  auto [lo, hi] = extent(c);
  auto [s, e] = extent(x);
  return lo < e && s < hi;
}

bool same(const at::Tensor& x, const at::Tensor& y) {
  return x.data_ptr() == y.data_ptr() && x.sizes() == y.sizes() && x.strides() == y.strides();
}

// -1: not a value the kernels take as it is (torch's kernel or Python decides); else a
// tag for the key: 1 an integer, 2 a float
int scalar_tag(const c10::Scalar& s) {
  if (s.isBoolean() || s.isComplex() || s.isSymbolic()) return -1;
  return s.isIntegral(false) ? 1 : 2;
}

int64_t scalar_bits(const c10::Scalar& s) {
  if (s.isIntegral(false)) return s.toLong();
  double d = s.toDouble();
  int64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  return bits;
}

bool scalar_zero(const c10::Scalar& s) {
  return s.isIntegral(false) ? s.toLong() == 0 : s.toDouble() == 0.0;
}

py::object py_scalar(const c10::Scalar& s) {
  if (s.isIntegral(false)) return py::int_(s.toLong());
  return py::float_(s.toDouble());
}

uint64_t current_stream(const at::Device& d) {
  if (d.is_cpu()) return 0;  // the CPU tests' stand-in launch
  const auto* impl = c10::impl::getDeviceGuardImpl(d.type());
  return reinterpret_cast<uint64_t>(impl->getStream(d).native_handle());
}

void ready(const at::Device& d) {
  py::gil_scoped_acquire gil;
  (*g_ready)(d.index());
}

void launch(const Launch& L, const uint64_t (&ptr)[4], uint64_t zeroed, uint64_t scratch,
            uint64_t stream, const at::Device& d) {
  uint64_t cells[kMaxArgs];
  void* params[kMaxArgs];
  size_t n = L.cells.size();
  std::memcpy(cells, L.cells.data(), n * sizeof(uint64_t));
  for (const auto& s : L.slots) cells[s.first] = ptr[s.second];
  for (const auto& t : L.tail) cells[n++] = (t[1] == 0 ? zeroed : scratch) + t[2];
  for (size_t i = 0; i < n; ++i) params[i] = &cells[i];
  int err = g_launch(L.kernel, L.grid[0], L.grid[1], L.grid[2], L.block[0], L.block[1],
                     L.block[2], 0, stream, params, nullptr);
  if (err == kInvalidContext) {  // a thread with no context current yet: make it, once
    ready(d);
    err = g_launch(L.kernel, L.grid[0], L.grid[1], L.grid[2], L.block[0], L.block[1],
                   L.block[2], 0, stream, params, nullptr);
  }
  TORCH_CHECK(err == 0, "sgemmlab: cuLaunchKernel failed with CUresult ", err, " (grid ",
              L.grid[0], "x", L.grid[1], "x", L.grid[2], ", block ", L.block[0], "x",
              L.block[1], "x", L.block[2], ")");
}

// The call on a recipe; false where the recipe cannot serve this very call (a new output
// that is not 16-byte aligned: Python then serves it)
bool run(const Recipe& r, const at::Tensor* x, const at::Tensor& a, const at::Tensor& b,
         at::Tensor& target, bool fresh) {
  const at::Device d = a.device();
  c10::DeviceGuard guard(d);
  if (fresh) target = at::empty(r.shape, a.options());
  uint64_t ptr[4] = {reinterpret_cast<uint64_t>(a.data_ptr()),
                     reinterpret_cast<uint64_t>(b.data_ptr()),
                     reinterpret_cast<uint64_t>(target.data_ptr()),
                     x ? reinterpret_cast<uint64_t>(x->data_ptr()) : 0};
  if (fresh && (ptr[OUT] & 15) != 0) return false;
  if (r.launches.empty()) return true;
  uint64_t stream = current_stream(d);
  uint64_t zeroed = 0, scratch = 0;
  at::Tensor hold;
  if (r.zeroed != 0 || r.scratch != 0)
    std::tie(zeroed, scratch) = workspace(d, stream, r.zeroed, r.scratch, hold);
  for (const auto& L : r.launches) launch(L, ptr, zeroed, scratch, stream, d);
  return true;
}

// Python's side of a call this file has no recipe for
std::optional<at::Tensor> ask(Op op, const Key* key, const at::Tensor* x, const at::Tensor& a,
                              const at::Tensor& b, const at::Tensor* out,
                              const c10::Scalar& beta, const c10::Scalar& alpha) {
  py::gil_scoped_acquire gil;
  std::optional<at::Tensor> result;
  try {
    py::object got = (*g_miss)(static_cast<int>(op), x ? py::cast(*x) : py::none(), a, b,
                               out ? py::cast(*out) : py::none(), py_scalar(beta),
                               py_scalar(alpha));
    py::object value = got[py::int_(0)], recipe = got[py::int_(1)];
    if (!value.is_none()) result = py::cast<at::Tensor>(value);
    if (key != nullptr && !recipe.is_none()) keep(*key, parse(recipe));
  } catch (py::error_already_set& e) {
    std::string what = e.what();
    TORCH_CHECK(false, "sgemmlab's switch: ", what);
  }
  return result;
}

// The whole decision for one call: the result, or nothing (torch's kernel runs it)
std::optional<at::Tensor> serve(Op op, const at::Tensor* x, const at::Tensor& a,
                                const at::Tensor& b, const at::Tensor* out,
                                const c10::Scalar& beta, const c10::Scalar& alpha) {
  int precision = g_precision.load(std::memory_order_relaxed);
  if (precision == -2) return std::nullopt;
  auto& ctx = at::globalContext();
  if (precision == -1) {
    if (ctx.allowTF32CuBLAS()) return std::nullopt;  // the program accepted TF32: cuBLAS's
    precision = 0;
  }
  bool det = g_deterministic.load(std::memory_order_relaxed) || ctx.deterministicAlgorithms();
  const int dims = kDims[op];
  auto plain = [](const at::Tensor& t) {
    return t.scalar_type() == at::kFloat && t.layout() == at::kStrided;
  };
  if (!plain(a) || !plain(b) || a.dim() != dims || b.dim() != dims) return std::nullopt;
  if (x && (!plain(*x) || x->dim() > dims)) return std::nullopt;  // torch refuses such x
  if (out && !plain(*out)) return std::nullopt;
  if (dims == 2 ? a.size(1) != b.size(0)
                : a.size(0) != b.size(0) || a.size(2) != b.size(1))
    return std::nullopt;  // torch's kernel raises its own error
  const at::Device d = a.device();
  if (b.device() != d || (x && x->device() != d) || (out && out->device() != d))
    return std::nullopt;
  int beta_tag = kAdds[op] ? scalar_tag(beta) : 0, alpha_tag = kAdds[op] ? scalar_tag(alpha) : 0;
  if (beta_tag < 0 || alpha_tag < 0) return std::nullopt;
  if (a.is_neg() || b.is_neg() || (x && x->is_neg()) || (out && out->is_neg()))
    return std::nullopt;
  bool reads_x = kAdds[op] && !scalar_zero(beta);
  if (out) {
    if (dims == 2 ? out->dim() != 2 || out->size(0) != a.size(0) || out->size(1) != b.size(1)
                  : out->dim() != 3 || out->size(0) != a.size(0) ||
                        out->size(1) != a.size(1) || out->size(2) != b.size(2))
      return std::nullopt;  // torch resizes it
    if (overlap(*out, a) || overlap(*out, b)) return std::nullopt;
    if (reads_x && !same(*out, *x) && overlap(*out, *x)) return std::nullopt;
  }
  uint64_t bits = reinterpret_cast<uint64_t>(a.data_ptr()) |
                  reinterpret_cast<uint64_t>(b.data_ptr()) |
                  (out ? reinterpret_cast<uint64_t>(out->data_ptr()) : 0);
  Key key;
  key.add(op);
  key.add(precision);
  key.add(det);
  key.add(static_cast<int64_t>(d.type()) << 16 | (d.index() & 0xffff));
  key.add((bits & 15) == 0);
  key.add(out && x && same(*out, *x));
  // an input the epilogue may read in place of C (a bias): its float4 alignment, as theirs
  key.add(reads_x && (reinterpret_cast<uint64_t>(x->data_ptr()) & 15) != 0);
  if (kAdds[op]) {
    key.add(beta_tag);
    key.add(scalar_bits(beta));
    key.add(alpha_tag);
    key.add(scalar_bits(alpha));
    key.add(*x);
  }
  key.add(a);
  key.add(b);
  if (out) key.add(*out);
  if (auto r = find(key)) {
    if (r->refuse) return std::nullopt;
    at::Tensor target = out ? *out : at::Tensor();
    if (run(*r, reads_x ? x : nullptr, a, b, target, out == nullptr)) {
      g_served[op].fetch_add(1, std::memory_order_relaxed);
      return target;
    }
    return ask(op, nullptr, x, a, b, out, beta, alpha);
  }
  return ask(op, &key, x, a, b, out, beta, alpha);
}

// ---------------------------------------------------------------------------------------
// The aten kernels
// ---------------------------------------------------------------------------------------
const c10::Scalar kOne(1), kZero(0);

at::Tensor product(Op op, c10::DispatchKeySet ks, const at::Tensor& a, const at::Tensor& b) {
  if (auto r = serve(op, nullptr, a, b, nullptr, kZero, kOne)) return *r;
  torch::jit::Stack stack{a, b};
  pass(op, ks, stack);
  return stack.back().toTensor();
}

at::Tensor& product_out(Op op, c10::DispatchKeySet ks, const at::Tensor& a, const at::Tensor& b,
                        at::Tensor& out) {
  if (serve(op, nullptr, a, b, &out, kZero, kOne)) return out;
  torch::jit::Stack stack{a, b, out};
  pass(op, ks, stack);
  return out;
}

at::Tensor add_product(Op op, c10::DispatchKeySet ks, const at::Tensor& x, const at::Tensor& a,
                       const at::Tensor& b, const c10::Scalar& beta, const c10::Scalar& alpha) {
  if (auto r = serve(op, &x, a, b, nullptr, beta, alpha)) return *r;
  torch::jit::Stack stack{x, a, b, c10::IValue(beta), c10::IValue(alpha)};
  pass(op, ks, stack);
  return stack.back().toTensor();
}

at::Tensor& add_product_out(Op op, c10::DispatchKeySet ks, const at::Tensor& x,
                            const at::Tensor& a, const at::Tensor& b, const c10::Scalar& beta,
                            const c10::Scalar& alpha, at::Tensor& out) {
  if (serve(op, &x, a, b, &out, beta, alpha)) return out;
  torch::jit::Stack stack{x, a, b, c10::IValue(beta), c10::IValue(alpha), out};
  pass(op, ks, stack);
  return out;
}

at::Tensor mm(c10::DispatchKeySet ks, const at::Tensor& a, const at::Tensor& b) {
  return product(MM, ks, a, b);
}
at::Tensor bmm(c10::DispatchKeySet ks, const at::Tensor& a, const at::Tensor& b) {
  return product(BMM, ks, a, b);
}
at::Tensor& mm_out(c10::DispatchKeySet ks, const at::Tensor& a, const at::Tensor& b,
                   at::Tensor& out) {
  return product_out(MM_OUT, ks, a, b, out);
}
at::Tensor& bmm_out(c10::DispatchKeySet ks, const at::Tensor& a, const at::Tensor& b,
                    at::Tensor& out) {
  return product_out(BMM_OUT, ks, a, b, out);
}
at::Tensor addmm(c10::DispatchKeySet ks, const at::Tensor& x, const at::Tensor& a,
                 const at::Tensor& b, const c10::Scalar& beta, const c10::Scalar& alpha) {
  return add_product(ADDMM, ks, x, a, b, beta, alpha);
}
at::Tensor baddbmm(c10::DispatchKeySet ks, const at::Tensor& x, const at::Tensor& a,
                   const at::Tensor& b, const c10::Scalar& beta, const c10::Scalar& alpha) {
  return add_product(BADDBMM, ks, x, a, b, beta, alpha);
}
at::Tensor& addmm_out(c10::DispatchKeySet ks, const at::Tensor& x, const at::Tensor& a,
                      const at::Tensor& b, const c10::Scalar& beta, const c10::Scalar& alpha,
                      at::Tensor& out) {
  return add_product_out(ADDMM_OUT, ks, x, a, b, beta, alpha, out);
}
at::Tensor& baddbmm_out(c10::DispatchKeySet ks, const at::Tensor& x, const at::Tensor& a,
                        const at::Tensor& b, const c10::Scalar& beta, const c10::Scalar& alpha,
                        at::Tensor& out) {
  return add_product_out(BADDBMM_OUT, ks, x, a, b, beta, alpha, out);
}

// ---------------------------------------------------------------------------------------
// What Python calls
// ---------------------------------------------------------------------------------------
class Quiet : public c10::WarningHandler {  // "Overriding a previously registered kernel"
 public:
  void process(const c10::Warning&) override {}
};

// Register the kernels for dispatch key `key` ("CUDA"; the CPU tests: "CPU")
void enable(const std::string& key, uint64_t launch_fn, uint64_t capturing_fn, py::object miss,
            py::object ready_fn, py::object workspace_fn) {
  TORCH_CHECK(!g_library, "sgemmlab's switch is already registered");
  const c10::DispatchKey k = c10::parseDispatchKey(key);
  if (g_orig == nullptr) {  // torch's kernels, kept for the process's life
    auto* orig = new Originals();
    for (int op = 0; op < NOPS; ++op) {
      std::string name = kOpName[op];
      auto dot = name.find('.');
      std::string overload = dot == std::string::npos ? "" : name.substr(dot + 1);
      name = "aten::" + name.substr(0, dot);
      orig->op[op].emplace(c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(),
                                                                           overload.c_str()));
      orig->kernel[op].emplace(orig->op[op]->getComputedKernelForDispatchKey(k));
    }
    g_orig = orig;
  }
  g_launch = reinterpret_cast<LaunchFn>(launch_fn);
  g_capturing = reinterpret_cast<CapturingFn>(capturing_fn);
  if (g_miss == nullptr) {  // the callbacks live as long as the process (never destroyed at
    g_miss = new py::object();  // exit, when Python may be gone)
    g_ready = new py::object();
    g_workspace = new py::object();
  }
  *g_miss = std::move(miss);
  *g_ready = std::move(ready_fn);
  *g_workspace = std::move(workspace_fn);
  Quiet quiet;
  c10::WarningUtils::WarningHandlerGuard guard(&quiet);
  auto lib = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", k, __FILE__, __LINE__);
  lib->impl("mm", TORCH_FN(mm));
  lib->impl("mm.out", TORCH_FN(mm_out));
  lib->impl("addmm", TORCH_FN(addmm));
  lib->impl("addmm.out", TORCH_FN(addmm_out));
  lib->impl("bmm", TORCH_FN(bmm));
  lib->impl("bmm.out", TORCH_FN(bmm_out));
  lib->impl("baddbmm", TORCH_FN(baddbmm));
  lib->impl("baddbmm.out", TORCH_FN(baddbmm_out));
  g_library = std::move(lib);
}

// Give the ops back to torch (destroying the library restores its kernels)
void disable() {
  g_library.reset();
  g_precision.store(-2);
}

void set_mode(int precision, bool deterministic) {
  g_deterministic.store(deterministic);
  g_precision.store(precision);
}

// (served, passed) per op since the last call, and zeroed
py::tuple take_counts() {
  py::dict served, passed;
  for (int op = 0; op < NOPS; ++op) {
    int64_t s = g_served[op].exchange(0), p = g_passed[op].exchange(0);
    if (s) served[kOpName[op]] = s;
    if (p) passed[kOpName[op]] = p;
  }
  return py::make_tuple(served, passed);
}

void clear() {
  std::lock_guard<std::mutex> g(g_recipes_lock);
  g_recipes.clear();
}

size_t recipes() {
  std::lock_guard<std::mutex> g(g_recipes_lock);
  return g_recipes.size();
}

// runtime/workspace.py replaced or freed a buffer: every stream asks again
void bump() { g_generation.fetch_add(1); }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "sgemmlab's drop-in switch: the hot path of every product (sgemmlab/dropin/)";
  m.def("enable", &enable);
  m.def("disable", &disable);
  m.def("set_mode", &set_mode);
  m.def("take_counts", &take_counts);
  m.def("clear", &clear);
  m.def("recipes", &recipes);
  m.def("bump", &bump);
  m.attr("OPS") = py::make_tuple(kOpName[0], kOpName[1], kOpName[2], kOpName[3], kOpName[4],
                                 kOpName[5], kOpName[6], kOpName[7]);
}
