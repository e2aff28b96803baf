"""rnnlm: recurrent language models written by hand in PyTorch, trained and measured by DVC."""

import sys

from rnnlm.command_line import interrupted_while_starting

# The first thing every stage and command imports: Ctrl-C during the seconds of imports that follow
# ends in one line (rnnlm.command_line), as it does once the command runs.
sys.excepthook = interrupted_while_starting
