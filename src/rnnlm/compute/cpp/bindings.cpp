// The Python module of the compiled code: every registered cell's loops (NAME.cpp beside this file) and the
// generation loop (compute/cpp/generation.cpp).

#include "kernels.h"

namespace rnnlm {
void bind_generation(pybind11::module_& m);  // compute/cpp/generation.cpp
}  // namespace rnnlm

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "rnnlm's compiled loops for CPU tensors: each cell's scan and sampling advance, the choice of the "
            "next token and the generation loop (Python twins: rnnlm/models/cells, rnnlm/inference)";
  for (const auto& [name, kernels] : rnnlm::cell_registry()) kernels.bind(m);
  rnnlm::bind_generation(m);
  m.def("set_gemm", &rnnlm::set_gemm, "the float32 GEMM ('mkl' or 'onednn') of one time step's products and of "
        "those of one row, the fewest multiply-adds a product needs to go to oneDNN and to use the thread pool "
        "(rnnlm.compute.backend.tell calls it)",
        pybind11::arg("narrow"), pybind11::arg("one_row"), pybind11::arg("min_onednn_macs"),
        pybind11::arg("min_parallel_macs"));
  m.def("gemm", &rnnlm::gemm_name, "the float32 GEMM of one time step's products now");
  m.def("one_row_gemm", &rnnlm::one_row_gemm_name,
        "the float32 GEMM of one time step's products of one row (and at least min_onednn_macs) now");
  m.def("min_onednn_macs", &rnnlm::min_onednn_macs, "the fewest multiply-adds a product needs to go to oneDNN");
  m.def("min_parallel_macs", &rnnlm::min_parallel_macs,
        "the fewest multiply-adds a per-time-step product needs to use the thread pool (fewer: the calling thread)");
  m.def("on_calling_thread", &rnnlm::on_calling_thread, pybind11::arg("macs"),
        "whether a per-time-step product of this many multiply-adds runs on the calling thread");
  m.def("onednn_t_addmm", &rnnlm::onednn_t_addmm, "a (M, N), b (M, K) -> c + a^T b (N, K), c updated in place");
  pybind11::class_<rnnlm::NarrowProduct>(m, "NarrowProduct",
                                       "x (B, K) -> x W^T for one weight W (N, K) used at each of `time_steps` time steps, as "
                                       "the scans run their per-time-step products (the speed benchmark times them alone)")
      .def(pybind11::init<const at::Tensor&, int64_t, int64_t>(), pybind11::arg("weight"), pybind11::arg("batch"),
           pybind11::arg("time_steps"))
      .def("__call__", &rnnlm::NarrowProduct::operator(), pybind11::arg("x"));
}
