"""DVC stage `train`: train the model that params.yaml's `model:` selects.

Usage: python stages/train.py PREPARED_DIR TOKENIZER_DIR CHECKPOINT REPORT_DIR RESUME_DIR TIMING_JSON
Writes the checkpoint and, in REPORT_DIR, metrics.json, steps.tsv and epochs.tsv (also while it trains,
after every save, marked "finished": false until the end); TIMING_JSON, where
this run's time went (`rnnlm.stage_clock`: training, of which the per-epoch validation). RESUME_DIR keeps
the run's last saved state (an epoch's end, or a block inside one) until every output is written (not
tracked by git or DVC): $RNNLM_RESUME_DIR when set, else RESUME_DIR in the main repository, also for a
queued experiment (`rnnlm.training.resume.resume_folder`).
"""

from pathlib import Path

from rnnlm.models.checkpoint import save_checkpoint
from rnnlm.data.corpus import TRAIN_FILE, VAL_FILE, read_corpus
from rnnlm.compute import backend, threads
from rnnlm.command_line import RESUMES, command_args, run_main
from rnnlm.scale import validation_text
from rnnlm.memory import fits_in_memory, keep_freed_memory
from rnnlm.params import load_params
from rnnlm.data.tokenizers import load_tokenizer
from rnnlm.training.record import RunRecord
from rnnlm.training.resume import resume_folder
from rnnlm.training.settings import run_settings
from rnnlm.training.train import train
from rnnlm.reporting.training_report import clear_signal, signal_new_figures, write_training_report
from rnnlm.stage_clock import StageClock


def main() -> None:
    clock = StageClock("train")
    keep_freed_memory()  # the scans' large arrays reused, not faulted in afresh every step
    threads.join()  # the cores shared with the other rnnlm processes on this machine, as they come and go
    prepared, tokenizer_dir, checkpoint, report_dir, resume_dir, timing = command_args(__doc__)
    params = load_params()
    name, entry = params.model, params.selected  # as generate and evaluate take it
    tokenizer = load_tokenizer(entry.tokens, prepared, tokenizer_dir)
    run = run_settings(params, name, tokenizer.vocab_size)  # what the run reads of params.yaml, read once
    train_text = read_corpus(Path(prepared) / TRAIN_FILE)
    val_text = validation_text(read_corpus(Path(prepared) / VAL_FILE), run.train.steps_scale)  # part of it: a quick run
    request = f"training {name} (train.batch_size {run.train.batch_size}, train.seq_len {run.train.seq_len})"
    if note := backend.unlisted_cpu_note(run.device):  # a CPU model the GEMM table does not list yet
        print(note)

    def live(progress) -> None:  # the figures so far, for `dvc exp show` and `study status` while it trains
        write_training_report(report_dir, name, progress)
        signal_new_figures(len(progress.history.epochs))

    record = RunRecord(resume_folder(resume_dir), clock=clock, on_progress=live)
    with fits_in_memory(request, run.device):
        with clock.part("training, per-epoch validation included"):
            result = train(run, tokenizer, train_text, val_text, record)
    save_checkpoint(checkpoint, result.checkpoint)
    write_training_report(report_dir, name, result)  # the finished run's: no "finished": false
    clear_signal()
    clock.write(timing)
    result.resume.clear()  # only now: a failure above reruns from the saved state, not from epoch 1
    print(f"wrote {checkpoint}: {name}, {result.parameters:,} parameters, {result.seconds:.0f}s on {result.device}")


if __name__ == "__main__":
    run_main(main, again=RESUMES)
