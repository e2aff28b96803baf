// The Python module of the C++ code (rnnlm/native.py joins scan_loops.cpp, generation.cpp and this
// file into one translation unit and builds it).

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "rnnlm's scan loops, sampling steps and generation loop for CPU tensors (Python twins: "
            "rnnlm/scan_loops.py, rnnlm/stepping.py, rnnlm/sampling.py)";
  m.def("gru_forward", &gru_forward);
  m.def("gru_backward", &gru_backward);
  m.def("lstm_forward", &lstm_forward);
  m.def("lstm_backward", &lstm_backward);
  m.def("rnn_forward", &rnn_forward);
  m.def("rnn_backward", &rnn_backward);
  m.def("gru_step", &gru_step);
  m.def("lstm_step", &lstm_step);
  m.def("rnn_step", &rnn_step);
  m.def(
      "pick",
      [](const at::Tensor& logits, const std::string& strategy, double temperature, int64_t top_k, double top_p,
         std::optional<at::Generator> generator) { return pick(logits, {strategy, temperature, top_k, top_p}, generator); },
      "logits (B, V) -> next ids (B,), as rnnlm.sampling.pick");
  py::class_<CompiledStepper>(m, "Stepper")
      .def(py::init<std::string, at::Tensor, std::vector<at::Tensor>, std::vector<at::Tensor>,
                    std::vector<std::vector<at::Tensor>>, std::optional<at::Tensor>, std::optional<at::Tensor>, double,
                    at::Tensor, at::Tensor>())
      .def("step", &CompiledStepper::step)
      .def("generate", &CompiledStepper::generate);
}
