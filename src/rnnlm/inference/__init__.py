"""Running a trained model: the advance by one token (`advancing`), the choice of the next token
(`decoding`), the two inference modes, their loop and the generate stage's samples (`generation`;
the same loop compiled for the CPU is `compute/cpp/generation.cpp`), and the samples' file format
(`generation_record`)."""
