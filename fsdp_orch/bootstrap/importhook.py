"""Run a callback right after a module is imported, without importing it first (post-import hooks).

The bootstrap must not import torch early, yet must register torch's global optimizer-step hook and
wrap ``init_process_group`` as soon as torch loads them. A meta-path finder wraps the loader of each
watched module; once the module has executed, the callback gets it.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing costs milliseconds in every Python process of the job
if TYPE_CHECKING:
    from collections.abc import Callable
    from importlib.abc import Loader as _Loader
    from types import ModuleType
    from typing import Any

    Callback = Callable[[ModuleType], None]
else:  # importlib.abc is not imported here at run time: the loader protocol is all it needs
    _Loader = object


class _CallbackLoader(_Loader):
    def __init__(self, loader: Any, callback: Callback):
        self._loader = loader
        self._callback = callback

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        self._callback(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class PostImportFinder:
    """Finds nothing itself: asks the finders after it, and wraps the loader of watched names."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callback]] = {}

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        callbacks = self.callbacks.get(name)
        if not callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _CallbackLoader(spec.loader, self._run(name))
                return spec
        return None

    def _run(self, name: str) -> Callback:
        def run(module: ModuleType) -> None:
            for callback in self.callbacks.pop(name, []):
                callback(module)
        return run


_finder: PostImportFinder | None = None


def when_imported(name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once ``name`` has been imported (now, if it already is)."""
    global _finder
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
        return
    if _finder is None:
        _finder = PostImportFinder()
        sys.meta_path.insert(0, _finder)
    _finder.callbacks.setdefault(name, []).append(callback)
