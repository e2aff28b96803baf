"""Running a trained model: the one-token step (`stepping`), the two inference modes and the choice of
the next token (`decoding`), and the same loop compiled for the CPU (`generation.cpp`)."""
