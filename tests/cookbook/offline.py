"""Small in-memory stand-ins for the hub datasets that some recipes hard-code.

The suite runs offline (HF_HUB_OFFLINE=1, HF_DATASETS_OFFLINE=1). A recipe that calls
datasets.load_dataset("<hub id>") gets, through drive.py, a datasets.Dataset (or
DatasetDict) built here with the same columns as the hub dataset and a few hundred rows of
arithmetic ("What is 17 + 25?" / "42"), which the tiny preset model can learn in a few
steps. Any other name is an error: nothing is fetched.
"""

from __future__ import annotations

import random

import datasets

_N_TRAIN, _N_TEST = 256, 32


def _pairs(n: int, seed: int) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    return [(rng.randint(0, 50), rng.randint(0, 50)) for _ in range(n)]


def _no_robots(n: int, seed: int) -> datasets.Dataset:
    rows = {"prompt": [], "prompt_id": [], "messages": [], "category": []}
    for i, (x, y) in enumerate(_pairs(n, seed)):
        q = f"What is {x} + {y}?"
        rows["prompt"].append(q)
        rows["prompt_id"].append(f"p{seed}-{i}")
        rows["messages"].append([{"role": "user", "content": q}, {"role": "assistant", "content": str(x + y)}])
        rows["category"].append("Arithmetic")
    return datasets.Dataset.from_dict(rows)


def _gsm8k(n: int, seed: int) -> datasets.Dataset:
    rows = {"question": [], "answer": []}
    for x, y in _pairs(n, seed):
        rows["question"].append(f"What is {x} + {y}?")
        rows["answer"].append(f"{x} + {y} = {x + y}\n#### {x + y}")
    return datasets.Dataset.from_dict(rows)


def _hh_rlhf(n: int, seed: int) -> datasets.Dataset:
    # Helpful (the sum) over unhelpful (a refusal): a preference a tiny model learns quickly.
    rows = {"chosen": [], "rejected": []}
    for x, y in _pairs(n, seed):
        prefix = f"\n\nHuman: What is {x} + {y}?\n\nAssistant:"
        rows["chosen"].append(f"{prefix} {x + y}")
        rows["rejected"].append(f"{prefix} I cannot help with that.")
    return datasets.Dataset.from_dict(rows)


def _deepmath(n: int, seed: int) -> datasets.Dataset:
    rows = {"question": [], "final_answer": [], "difficulty": [], "topic": [],
            "r1_solution_1": [], "r1_solution_2": [], "r1_solution_3": []}
    for x, y in _pairs(n, seed):
        rows["question"].append(f"What is {x} + {y}?")
        rows["final_answer"].append(str(x + y))
        rows["difficulty"].append(1.0)
        rows["topic"].append("Mathematics -> Arithmetic")
        for k in (1, 2, 3):
            rows[f"r1_solution_{k}"].append(f"{x} + {y} = {x + y}")
    return datasets.Dataset.from_dict(rows)


# hub id (and config name) -> builder of each split
_HUB = {
    ("HuggingFaceH4/no_robots", None): _no_robots,
    ("openai/gsm8k", "main"): _gsm8k,
    ("Anthropic/hh-rlhf", None): _hh_rlhf,
    ("zwhe99/DeepMath-103K", None): _deepmath,
}

# Every hub id a recipe asked for, in order: the tests check that the driver was used.
requested: list[str] = []


def load_dataset(path: str, name: str | None = None, *, split: str | None = None, **kwargs):
    """datasets.load_dataset for the hub ids in _HUB; anything else raises."""
    if kwargs.get("streaming"):
        raise ValueError(f"offline stand-in for {path!r}: streaming is not provided")
    build = _HUB.get((path, name))
    if build is None:
        raise ValueError(
            f"the cookbook suite runs offline: no in-memory stand-in for dataset {path!r} (config {name!r}); "
            "add one to tests/cookbook/offline.py"
        )
    requested.append(path)
    splits = datasets.DatasetDict({"train": build(_N_TRAIN, 0), "test": build(_N_TEST, 1)})
    if split is None:
        return splits
    if split not in splits:
        raise ValueError(f"offline stand-in for {path!r} has no split {split!r}")
    return splits[split]
