"""triton-sweep at home in the user's repository: from the directory a command runs in, its `sweeps/` is
the config group `sweep` (`+sweep=NAME`: the files `triton_sweep.capture --out sweeps/NAME` writes, or any of
the user's), ahead of the tool's own ready files, so that a user's file of a name wins; its `conf/` adds
config groups of the user's own (`conf/kernel/NAME.yaml`, ...), behind the tool's (a `conf/config.yaml`
of another application there is never the primary config). Hydra takes search-path and config-source
plugins only from the hydra_plugins namespace package, hence this package."""
from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

from hydra.core.config_search_path import ConfigSearchPath
from hydra.core.object_type import ObjectType
from hydra.plugins.config_source import ConfigLoadError, ConfigResult, ConfigSource
from hydra.plugins.search_path_plugin import SearchPathPlugin
from omegaconf import OmegaConf

GROUP = "sweep"


class SweepFolder(ConfigSource):
    """A folder of sweep files (`triton-sweeps://FOLDER`) as the one config group `sweep`."""

    @staticmethod
    def scheme() -> str:
        return "triton-sweeps"

    def _file(self, config_path: str) -> Optional[Path]:
        group, _, name = config_path.partition("/")
        if group != GROUP or not name or "/" in name:
            return None
        return Path(self.path) / self._normalize_file_name(name)

    def load_config(self, config_path: str) -> ConfigResult:
        path = self._file(config_path)
        if path is None or not path.is_file():
            raise ConfigLoadError(f"Config not found: {config_path} in {self.path}")
        text = path.read_text(encoding="utf-8")
        return ConfigResult(config=OmegaConf.create(text), path=f"{self.scheme()}://{self.path}",
                            provider=self.provider, header=ConfigSource._get_header_dict(text[:512]))

    def available(self) -> bool:
        return os.path.isdir(self.path)

    def is_group(self, config_path: str) -> bool:
        return config_path.strip("/") in ("", GROUP)

    def is_config(self, config_path: str) -> bool:
        path = self._file(config_path)
        return path is not None and path.is_file()

    def list(self, config_path: str, results_filter: Optional[ObjectType]) -> List[str]:
        files: List[str] = []
        if config_path.strip("/") == "":
            self._list_add_result(files, GROUP, GROUP, results_filter)
        elif config_path.strip("/") == GROUP:
            for path in sorted(Path(self.path).glob("*.yaml")):
                self._list_add_result(files, f"{GROUP}/{path.name}", path.name, results_filter)
        return sorted(set(files))


class UserRepository(SearchPathPlugin):
    """The working directory's sweeps/ first, its conf/ last."""

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        here = Path.cwd()
        if (here / "sweeps").is_dir():
            search_path.prepend("triton-sweep-user", f"{SweepFolder.scheme()}://{here / 'sweeps'}")
        if (here / "conf").is_dir():
            search_path.append("triton-sweep-user", f"file://{here / 'conf'}")
