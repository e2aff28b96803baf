"""The tests of rnnlm_study, the study beside the library."""
