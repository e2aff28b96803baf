"""Running a trained model: the one-token step (`stepping`), the two inference modes and the choice of
the next token (`decoding`), the same loop compiled for the CPU (`generation.cpp`), and the generate
stage's samples (`generation_run`) with their file format (`generation_record`)."""
