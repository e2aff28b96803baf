"""The compute machinery: where a model's arithmetic runs and how, in one package.

- `device`: the device a stage runs on (`train.device`, CUDA when there is one) and float32 precision;
- `cpu`: which CPU this is (vendor, generation, AVX-512), for the choices below and the records;
- `backend`: the one switch that decides which loops run the recurrences (compiled C++, Triton or
  Python), hands a cell its loops, and chooses the float32 GEMM library (oneDNN or MKL) each kind
  of product runs through on the CPU;
- `gemm_table`: that library per kind of product for each CPU model measured, with the figures it
  was chosen from (`gemm_table.json`);
- `products`: the matrix products every model and cell calls, through that choice;
- `sources` and `build`: the compiled C++ module, its translation units and its build; `cpp/` holds
  all of its C++: the shared kernels and the cells' registry, each cell's compiled loops
  (`cpp/NAME.cpp`, twin of `rnnlm/models/cells/NAME.py`), generation, the Python bindings. The
  build compiles what this folder holds; nothing above hands it sources.

Nothing here imports from the rest of the library but `rnnlm.errors`: models, cells, training and
inference import compute, never the reverse.
"""
