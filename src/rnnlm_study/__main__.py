from rnnlm.command_line import run_main
from rnnlm_study.cli import main

run_main(main)
