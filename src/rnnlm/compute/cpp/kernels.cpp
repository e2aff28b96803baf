// The shared parts of the cells' compiled loops declared in kernels.h: the hidden-side product and
// the registry of cells.

#include "kernels.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <omp.h>

#include <atomic>
#include <limits>

// PyTorch's own oneDNN matrix product (aten/src/ATen/native/mkldnn/Matmul.cpp: result = beta result +
// alpha mat1 mat2, operands row-major or transposed, exact float32 unless PyTorch is told otherwise);
// exported by libtorch_cpu, its header not shipped.
namespace at::native {
TORCH_API void mkldnn_matmul(const Tensor& mat1, const Tensor& mat2, const Tensor& result, float beta, float alpha);
}  // namespace at::native

namespace rnnlm {

namespace {

// PyTorch's own ops for MKL's and oneDNN's packed GEMM (what its CPU compiler uses for frozen
// linear layers on x86), looked up once; either may be absent from a build.
using Reorder = c10::TypedOperatorHandle<Tensor(const Tensor&, std::optional<int64_t>)>;
using MklReorder = c10::TypedOperatorHandle<Tensor(const Tensor&, int64_t)>;
using MklLinear =
    c10::TypedOperatorHandle<Tensor(const Tensor&, const Tensor&, const Tensor&, const std::optional<Tensor>&, int64_t)>;
using OnednnLinear = c10::TypedOperatorHandle<Tensor(const Tensor&, const Tensor&, const std::optional<Tensor>&,
                                                     std::string_view, c10::List<std::optional<c10::Scalar>>,
                                                     std::optional<std::string_view>)>;

struct GemmOps {
  std::optional<MklReorder> mkl_reorder;
  std::optional<MklLinear> mkl_linear;
  std::optional<Reorder> onednn_reorder;
  std::optional<OnednnLinear> onednn_linear;
};

const GemmOps& gemm_ops() {
  static const GemmOps ops = [] {
    auto& dispatcher = c10::Dispatcher::singleton();
    GemmOps found;
    auto mkl_reorder = dispatcher.findSchema({"mkl::_mkl_reorder_linear_weight", ""});
    auto mkl_linear = dispatcher.findSchema({"mkl::_mkl_linear", ""});
    if (mkl_reorder && mkl_linear) {
      found.mkl_reorder = mkl_reorder->typed<Tensor(const Tensor&, int64_t)>();
      found.mkl_linear =
          mkl_linear->typed<Tensor(const Tensor&, const Tensor&, const Tensor&, const std::optional<Tensor>&, int64_t)>();
    }
    auto onednn_reorder = dispatcher.findSchema({"mkldnn::_reorder_linear_weight", ""});
    auto onednn_linear = dispatcher.findSchema({"mkldnn::_linear_pointwise", ""});
    if (onednn_reorder && onednn_linear) {
      found.onednn_reorder = onednn_reorder->typed<Tensor(const Tensor&, std::optional<int64_t>)>();
      found.onednn_linear = onednn_linear->typed<Tensor(const Tensor&, const Tensor&, const std::optional<Tensor>&,
                                                        std::string_view, c10::List<std::optional<c10::Scalar>>,
                                                        std::optional<std::string_view>)>();
    }
    return found;
  }();
  return ops;
}

// x (B, K) W^T (+ bias) through oneDNN, W (N, K) plain or packed by onednn_reorder.
Tensor onednn_linear(const Tensor& x, const Tensor& weight, const std::optional<Tensor>& bias) {
  return gemm_ops().onednn_linear->call(x, weight, bias, "none", c10::List<std::optional<c10::Scalar>>(), std::nullopt);
}

std::atomic<Gemm> narrow_gemm{Gemm::mkl};
std::atomic<Gemm> one_row_gemm{Gemm::mkl};
std::atomic<int64_t> onednn_from_macs{std::numeric_limits<int64_t>::max()};
std::atomic<int64_t> parallel_from_macs{0};

Gemm parse_gemm(const std::string& name) {
  TORCH_CHECK(name == "mkl" || name == "onednn", "unknown GEMM ", name, "; expected mkl or onednn");
  TORCH_CHECK(name == "mkl" || gemm_ops().onednn_linear, "this PyTorch has no oneDNN linear op");
  return name == "onednn" ? Gemm::onednn : Gemm::mkl;
}

std::string name_of(Gemm gemm) { return gemm == Gemm::onednn ? "onednn" : "mkl"; }

// Whether a float32 product of one time step, `rows` rows and `macs` multiply-adds in all, runs
// through oneDNN: the one-row library's choice for one row of at least onednn_from_macs, the narrow
// library's for any other (the rule of rnnlm.compute.backend.Gemms.library).
bool use_onednn(const Tensor& x, int64_t rows, int64_t macs) {
  const Gemm chosen = rows == 1 && macs >= onednn_from_macs.load() ? one_row_gemm.load() : narrow_gemm.load();
  return chosen == Gemm::onednn && x.scalar_type() == at::kFloat && gemm_ops().onednn_linear;
}

}  // namespace

void set_gemm(const std::string& narrow, const std::string& one_row, int64_t min_onednn_macs,
              int64_t min_parallel_macs) {
  const Gemm narrow_choice = parse_gemm(narrow), one_row_choice = parse_gemm(one_row);
  TORCH_CHECK(min_onednn_macs >= 0, "min_onednn_macs must not be negative");
  TORCH_CHECK(min_parallel_macs >= 0, "min_parallel_macs must not be negative");
  onednn_from_macs.store(min_onednn_macs);
  parallel_from_macs.store(min_parallel_macs);
  narrow_gemm.store(narrow_choice);
  one_row_gemm.store(one_row_choice);
}

std::string gemm_name() { return name_of(narrow_gemm.load()); }

std::string one_row_gemm_name() { return name_of(one_row_gemm.load()); }

int64_t min_onednn_macs() { return onednn_from_macs.load(); }

int64_t min_parallel_macs() { return parallel_from_macs.load(); }

bool on_calling_thread(int64_t macs) { return macs < parallel_from_macs.load(); }

OnCallingThread::OnCallingThread(bool active) : active_(active) {
  if (!active_) return;
  omp_before_ = omp_get_max_threads();
  omp_set_num_threads(1);
}

OnCallingThread::~OnCallingThread() {
  if (active_) omp_set_num_threads(omp_before_);
}

bool narrow_uses_onednn(const Tensor& x, const Tensor& w_t) {
  const int64_t macs = x.size(0) * w_t.size(0) * w_t.size(1);
  return use_onednn(x, x.size(0), macs) && macs >= onednn_from_macs.load();
}

NarrowProduct::NarrowProduct(const Tensor& weight, int64_t batch, int64_t time_steps)
    : weight_(weight), batch_(batch), onednn_(use_onednn(weight, batch, batch * weight.size(0) * weight.size(1))),
      serial_(on_calling_thread(batch * weight.size(0) * weight.size(1))) {
  const GemmOps& ops = gemm_ops();
  if (weight.scalar_type() != at::kFloat) return;
  if (onednn_) {
    weight_ = weight.contiguous();  // (N, K); the scans' backward passes transposed views
    if (time_steps >= kMinStepsToPack) packed_ = ops.onednn_reorder->call(weight_, batch_);
  } else if (ops.mkl_reorder && time_steps >= kMinStepsToPack) {
    weight_ = weight.contiguous();
    packed_ = ops.mkl_reorder->call(weight_, batch_);
  }
}

Tensor NarrowProduct::operator()(const Tensor& x) const {
  const OnCallingThread here(serial_);
  // oneDNN needs dense rows: the backward passes slices of the gates, whose rows are wider than them.
  if (onednn_) return onednn_linear(x.contiguous(), packed_.defined() ? packed_ : weight_, std::nullopt);
  if (packed_.defined()) return gemm_ops().mkl_linear->call(x, packed_, weight_, std::nullopt, batch_);
  return at::mm(x, weight_.t());
}

Tensor narrow_product(const Tensor& x, const Tensor& w_t) {
  const OnCallingThread here(on_calling_thread(x.size(0) * w_t.size(0) * w_t.size(1)));
  return narrow_uses_onednn(x, w_t) ? onednn_linear(x.contiguous(), w_t.t(), std::nullopt) : at::mm(x, w_t);
}

Tensor narrow_linear(const Tensor& bias, const Tensor& x, const Tensor& w_t) {
  const OnCallingThread here(on_calling_thread(x.size(0) * w_t.size(0) * w_t.size(1)));
  // The bias added after oneDNN's product, as products.linear adds it to a one-token product (why: there).
  if (narrow_uses_onednn(x, w_t)) return onednn_linear(x.contiguous(), w_t.t(), std::nullopt).add_(bias);
  return at::addmm(bias, x, w_t);
}

Tensor onednn_t_addmm(const std::optional<Tensor>& c, const Tensor& a, const Tensor& b) {
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat, "onednn_t_addmm: float32 only");
  Tensor out = c ? *c : at::empty({a.size(1), b.size(1)}, a.options());
  TORCH_CHECK(out.is_contiguous(), "onednn_t_addmm: c must be contiguous: it is written in place");
  // a.contiguous(): a slice of the gates has rows wider than itself; dense, its transpose is read in place.
  at::native::mkldnn_matmul(a.contiguous().t(), b.contiguous(), out, c ? 1.0f : 0.0f, 1.0f);
  return out;
}

std::map<std::string, CellKernels>& cell_registry() {
  static std::map<std::string, CellKernels> registry;  // made on first use, before any cell registers
  return registry;
}

const CellKernels& find_cell(const std::string& name) {
  const auto& registry = cell_registry();
  auto found = registry.find(name);
  if (found == registry.end()) {
    std::string known;
    for (const auto& entry : registry) known += (known.empty() ? "" : ", ") + entry.first;
    TORCH_CHECK(false, "unknown cell ", name, "; the compiled cells are ", known);
  }
  return found->second;
}

}  // namespace rnnlm
