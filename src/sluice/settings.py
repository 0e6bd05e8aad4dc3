"""Loading a role's settings: TOML file, then ``SLUICE_*`` environment, then CLI flags."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from sluice.errors import ConfigError

S = TypeVar("S", bound="SluiceSettings")


class SluiceSettings(BaseSettings):
    """Base of each role's configuration model."""

    model_config = SettingsConfigDict(env_prefix="SLUICE_", extra="forbid", frozen=True)
    toml_file: ClassVar[Path | None] = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        toml_file = getattr(settings_cls, "toml_file", None)
        if toml_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
        return tuple(sources)

    @classmethod
    def load(cls: type[S], config_file: Path | None = None, **overrides: Any) -> S:
        """Build the settings; flags given as ``overrides`` (None means not given)."""
        given = {k: v for k, v in overrides.items() if v is not None}
        target: type[S] = cls
        if config_file is not None:
            if not config_file.is_file():
                raise ConfigError(f"config file {config_file} does not exist")
            try:
                tomllib.loads(config_file.read_text("utf-8"))
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise ConfigError(f"config file {config_file} is not valid TOML: {exc}") from None
            target = type(cls.__name__, (cls,), {"toml_file": config_file})
        try:
            return target(**given)
        except ValidationError as exc:
            raise ConfigError(describe_errors(exc)) from None


def describe_errors(exc: ValidationError, env_prefix: str = "SLUICE_") -> str:
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "configuration"
        flag = "--" + where.replace("_", "-")
        problems.append(f"{where} ({flag} or {env_prefix}{where.upper()}): {err['msg']}")
    return "bad configuration: " + "; ".join(problems)
