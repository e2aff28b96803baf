"""DVC stage `evaluate`: measure what statefulness is worth for the trained model.

Usage: python stages/evaluate.py CHECKPOINT PREPARED_DIR GENERATIONS_JSON METRICS_JSON CURVE_CSV CONTEXT_CSV BLOCKS_CSV TIMING_JSON
Writes METRICS_JSON (state-reset curve, context curve and horizon, n-gram floor, text statistics per
mode), CURVE_CSV (the reset curve with the n-gram levels) and CONTEXT_CSV (the context curve), the
two for `dvc plots`, BLOCKS_CSV (each scorer's nats per 2,048-character block of the validation
split, for the study's text resampling) and TIMING_JSON: each part's wall and CPU seconds. Below full scale
(`train.steps_scale` < 1) it measures on part of the validation text (`rnnlm.scale`).
"""

from pathlib import Path

from rnnlm.models.checkpoint import load_checkpoint
from rnnlm.data.corpus import TRAIN_FILE, VAL_FILE, read_corpus
from rnnlm.compute import threads
from rnnlm.compute.device import device_for
from rnnlm.command_line import command_args, run_main
from rnnlm.memory import keep_freed_memory
from rnnlm.evaluation.blocks import write_blocks
from rnnlm.evaluation.evaluate import evaluate, write_context_curve, write_metrics, write_reset_curve
from rnnlm.scale import evaluate_settings, validation_text
from rnnlm.params import load_params
from rnnlm.inference.generation_record import read_generations
from rnnlm.stage_clock import StageClock


def main() -> None:
    clock = StageClock("evaluate")
    keep_freed_memory()  # the scans' large arrays reused, not faulted in afresh every step
    threads.join(adjust=False)  # counted by the trainings beside it, which leave it its share; its own count kept
    (checkpoint_path, prepared, generations_path, metrics_path, curve_path, context_path, blocks_path,
     timing) = command_args(__doc__)
    params = load_params()
    checkpoint = load_checkpoint(checkpoint_path, model_name=params.model)
    train_text = read_corpus(Path(prepared) / TRAIN_FILE)
    scale = params.train.steps_scale  # a quick run measures on part of the text, with fewer context targets
    val_text = validation_text(read_corpus(Path(prepared) / VAL_FILE), scale)
    metrics, curve, context, blocks = evaluate(checkpoint, train_text, val_text, read_generations(generations_path),
                                       evaluate_settings(params.evaluate, scale), params.seed, device_for(params.train),
                                       clock)
    write_metrics(metrics, metrics_path)
    write_reset_curve(curve, metrics, curve_path)
    write_context_curve(context, context_path)
    write_blocks(blocks, blocks_path)
    clock.write(timing)
    left_out = sorted(set(params.evaluate.context_lengths) - set(context.lengths))
    if left_out:
        print(f"note: context lengths {left_out} left out: the validation split has {metrics['val_tokens'] + 1} tokens")
    print(f"{metrics['model']}: stateful {metrics['stateful_bpc']:.3f}, stateless {metrics['stateless_bpc']:.3f}, "
          f"bigram {metrics['bigram_bpc']:.3f} bits per character; context horizon {metrics['context_horizon']} "
          f"tokens (range {metrics['context_horizon_range']})")


if __name__ == "__main__":
    run_main(main)
