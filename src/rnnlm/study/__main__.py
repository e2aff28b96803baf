from rnnlm.command_line import run_main
from rnnlm.study.cli import main

run_main(main)
