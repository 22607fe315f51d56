"""Downloads a trained checkpoint with the cookbook's weights.download and converts it
with weights.build_lora_adapter, as a user exporting an adapter for serving would.

    python download_adapter.py TINKER_PATH BASE_MODEL_DIR OUT_DIR

weights.download loads the training checkpoint into a new run, exports it with
save_weights_external encrypted to a fresh age key, fetches the files from their signed
URLs, decrypts them and deletes the export. OUT_DIR/download then holds the adapter and
OUT_DIR/peft the PEFT adapter that build_lora_adapter makes of it.
"""

import os
import sys

from tinker_cookbook import weights


def main() -> None:
    tinker_path, base_model, out = sys.argv[1:4]
    adapter_dir = weights.download(tinker_path=tinker_path, output_dir=os.path.join(out, "download"))
    print("downloaded:", sorted(os.listdir(adapter_dir)))
    weights.build_lora_adapter(base_model=base_model, adapter_path=adapter_dir, output_path=os.path.join(out, "peft"))
    print("peft:", sorted(os.listdir(os.path.join(out, "peft"))))


if __name__ == "__main__":
    main()
