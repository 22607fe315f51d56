"""Thin driver for tinker_cookbook.distillation.train_off_policy, which has no CLI.

    python off_policy_distill.py model_name=... renderer_name=... dataset=FILE.jsonl \
        teacher_checkpoint=tinker://... log_path=... [n_teacher_targets=4 ...]

Builds the module's own Config (one domain: a JSONL chat dataset, read by the cookbook's
FromConversationFileBuilder, with one teacher: the base model with a trained sampler
checkpoint) and runs its own main(): the student trains with cross_entropy on (N, K) soft
targets made from the teacher's top-K prompt logprobs.
"""

import asyncio

import chz
from tinker_cookbook.distillation import train_off_policy
from tinker_cookbook.distillation.datasets import TeacherConfig
from tinker_cookbook.supervised.data import FromConversationFileBuilder
from tinker_cookbook.supervised.types import ChatDatasetBuilderCommonConfig


@chz.chz
class CLIConfig:
    model_name: str
    renderer_name: str
    dataset: str
    teacher_checkpoint: str
    log_path: str
    base_url: str | None = None
    n_teacher_targets: int = 4
    batch_size: int = 16
    learning_rate: float = 1e-3
    lora_rank: int = 8
    max_steps: int | None = None
    save_every: int = 0


def cli_main(c: CLIConfig) -> None:
    common = ChatDatasetBuilderCommonConfig(
        model_name_for_tokenizer=c.model_name,
        renderer_name=c.renderer_name,
        max_length=512,
        batch_size=c.batch_size,
    )
    config = train_off_policy.Config(
        learning_rate=c.learning_rate,
        dataset_configs=[
            train_off_policy.DatasetWithTeacher(
                dataset_builder=FromConversationFileBuilder(common_config=common, file_path=c.dataset),
                teacher_config=TeacherConfig(base_model=c.model_name, load_checkpoint_path=c.teacher_checkpoint),
            )
        ],
        model_name=c.model_name,
        recipe_name="tuft_cookbook_suite_off_policy_distillation",
        renderer_name=c.renderer_name,
        lora_rank=c.lora_rank,
        n_teacher_targets=c.n_teacher_targets,
        batch_size=c.batch_size,
        save_every=c.save_every,
        max_steps=c.max_steps,
        log_path=c.log_path,
        base_url=c.base_url,
    )
    asyncio.run(train_off_policy.main(config))


if __name__ == "__main__":
    cli_main(chz.entrypoint(CLIConfig))
