"""TorchX's side of the migration corpus: run with the TorchX venv's Python.

    PYTHONPATH=. .bench/torchx-venv/bin/python tests/torchx_corpus/torchx_side.py \
        tests/torchx_corpus/corpus.yaml

For each entry, TorchX's own finder and builder make the AppDef from the entry's
``torchx run`` words (as ``torchx run --dryrun`` would), it is converted with
distspec's :func:`~distspec.components.torchx_compat.from_torchx` and normalized
(:mod:`normalize`); prints one JSON object ``{id: roles | {"error": text}}``.
This is how the corpus's expected jobs were checked against TorchX; the corpus
test runs it again when the venv exists.
"""

from __future__ import annotations

import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from corpus import load_entries, split_run_args
from normalize import normalize


def main(path: str) -> int:
    from torchx.specs.builders import materialize_appdef
    from torchx.specs.finder import get_component

    from distspec.components.torchx_compat import from_torchx

    out: dict[str, object] = {}
    for entry in load_entries(path):
        scheduler, _cfg, component, args = split_run_args(entry["torchx"])
        name = entry.get("torchx_component", component)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn = get_component(name).fn
                app = materialize_appdef(fn, list(args))
            out[entry["id"]] = normalize(from_torchx(app, scheduler=scheduler))
        except BaseException as e:  # SystemExit from argparse, ValueError, ...
            out[entry["id"]] = {"error": f"{type(e).__name__}: {e}"}
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
