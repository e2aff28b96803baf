"""DVC stage `generate`: sample the trained model stateless and stateful.

Usage: python stages/generate.py CHECKPOINT GENERATIONS_JSON TIMING_JSON
For every prompt of params `generate.prompts`, every strategy (greedy, temperature, top-k, top-p)
and both modes, writes the samples to GENERATIONS_JSON (the `report` stage renders them), and where
its time went to TIMING_JSON. A quick run's samples are shorter, in proportion (`rnnlm.scale`).
"""


from rnnlm.atomic import write_text_atomic
from rnnlm.models.checkpoint import load_checkpoint
from rnnlm.compute import threads
from rnnlm.compute.device import device_for
from rnnlm.command_line import command_args, run_main
from rnnlm.params import load_params
from rnnlm.inference.generation import run_generations
from rnnlm.scale import generate_settings
from rnnlm.stage_clock import StageClock


def main() -> None:
    clock = StageClock("generate")
    threads.join(adjust=False)  # counted by the trainings beside it, which leave it its share; its own count kept
    checkpoint_path, json_path, timing = command_args(__doc__)
    params = load_params()
    checkpoint = load_checkpoint(checkpoint_path, model_name=params.model)
    with clock.part("sampling"):
        settings = generate_settings(params.generate, params.train.steps_scale)
        run = run_generations(checkpoint, checkpoint_path, settings, params.seed, device_for(params.train))
    write_text_atomic(json_path, run.to_json())
    clock.write(timing)
    print(f"wrote {json_path}: {len(run.samples)} samples of {run.model}")


if __name__ == "__main__":
    run_main(main)
