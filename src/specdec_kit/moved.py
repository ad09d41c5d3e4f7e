"""The kit's modules by the names they had before it had rooms, so that notebooks released earlier, and submissions
written from them, keep importing: `specdec_kit.readiness` is `specdec_kit.bench.readiness`, the same module object
(patching one patches the other)."""

import importlib
import importlib.abc
import importlib.util
import sys

# old name under specdec_kit -> its module now
MOVED = {
    **{name: f"core.{name}" for name in ("settings", "result", "cache", "sampling", "prompts", "theory",
                                         "tracebacks", "no_progress", "timing")},
    "tokenizer": "zoo.tokenizer", "zoo_models": "zoo.models", "zoo_tables": "zoo.tables",
    "loading": "models.loading", "baseline": "models.baseline",
    **{name: f"protocol.{name}" for name in ("adapters", "remote", "probes", "replay")},
    **{name: f"bench.{name}" for name in ("machine", "runners", "readiness", "sweeps", "plot", "figures", "demo")},
}


class OldNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `specdec_kit.<old name>` and hands back the module it became."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        return importlib.util.spec_from_loader(fullname, self) if package == "specdec_kit" and name in MOVED else None

    def exec_module(self, module):
        # importlib returns what sys.modules holds once this returns: the real module, its own __spec__ untouched
        now = MOVED[module.__name__.rpartition(".")[2]]
        sys.modules[module.__name__] = importlib.import_module(f"specdec_kit.{now}")


def install() -> None:
    if not any(isinstance(finder, OldNames) for finder in sys.meta_path):
        sys.meta_path.append(OldNames())
