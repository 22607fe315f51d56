"""Thin driver: runs a cookbook recipe's own entry point unchanged, with two substitutions.

    python drive.py MODULE [chz arguments ...]

1. datasets.load_dataset answers the hub datasets a recipe hard-codes from offline.py
   (small in-memory tables with the same columns); nothing is fetched.
2. With TUFT_RENDERER set, model_info.get_recommended_renderer_name answers it for the
   served model (named by its directory path, which the cookbook's model table does not
   know). Only sl_loop and rl_loop need this: they take no renderer argument.

Everything else (the recipe's CLI parsing, training loop, checkpointing, logging) is the
recipe's own code, run as __main__ exactly as `python -m MODULE` would.
"""

import os
import runpy
import sys

import datasets

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import offline  # noqa: E402

datasets.load_dataset = offline.load_dataset

renderer = os.environ.get("TUFT_RENDERER")
if renderer:
    from tinker_cookbook import model_info

    _recommended = model_info.get_recommended_renderer_name
    served = os.environ["TUFT_MODEL_PATH"]

    def get_recommended_renderer_name(model_name: str) -> str:
        if model_name.split(":", 1)[0] == served:
            return renderer
        return _recommended(model_name)

    model_info.get_recommended_renderer_name = get_recommended_renderer_name


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    module = sys.argv[1]
    sys.argv = [module] + sys.argv[2:]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        if offline.requested:
            print(f"drive.py: served in-memory datasets {sorted(set(offline.requested))}", file=sys.stderr)


if __name__ == "__main__":
    main()
