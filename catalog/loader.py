"""Load the built-in catalog (catalog/data/catalog.toml) into the database.

Idempotent: rows are matched by their natural keys (slugs; model x tier; model x
benchmark point) and only written when a value differs, so a second run changes
nothing. Lifecycle fields (dates, successor) are set when a model is first created;
afterwards they belong to the admins (the Django admin and its history), and the file
only overwrites them with `reset_lifecycle=True` — through the same lifecycle service,
so the history records it.
"""

from __future__ import annotations

import tomllib
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.db import models, transaction

from catalog.lifecycle import LifecycleError, model_update_lifecycle
from catalog.models import (
    Benchmark,
    Deployment,
    HardwarePool,
    ModelFamily,
    ModelVersion,
    NoticePolicy,
    Price,
    PublishedSpeed,
    Tier,
)
from simengine import SimEngineError
from simengine.model import architecture_kv_bytes

DEFAULT_CATALOG = Path(__file__).resolve().parent / "data" / "catalog.toml"


class CatalogFileError(ValueError):
    pass


@dataclass
class LoadReport:
    created: Counter = field(default_factory=Counter)
    updated: Counter = field(default_factory=Counter)
    unchanged: Counter = field(default_factory=Counter)

    @property
    def changed(self) -> bool:
        return bool(sum(self.created.values()) or sum(self.updated.values()))

    def summary(self) -> str:
        kinds = sorted(set(self.created) | set(self.updated) | set(self.unchanged))
        parts = [
            f"{k}: {self.created[k]} created, {self.updated[k]} updated, {self.unchanged[k]} unchanged"
            for k in kinds
        ]
        return "\n".join(parts)


class _Rows:
    """The rows already in a catalog table, read with one query per table the first time
    a load asks for one and keyed by their natural key. A load looks up every row it
    writes; asking the database once per row made a load ~300 queries (and every test
    that loads the catalog paid for them), this makes it one per table plus the writes."""

    def __init__(self) -> None:
        self._tables: dict[tuple, dict[tuple, models.Model]] = {}

    def _table(self, model: type[models.Model], names: tuple[str, ...]) -> dict:
        table = self._tables.get((model, names))
        if table is None:
            attnames = [model._meta.get_field(n).attname for n in names]
            table = {tuple(getattr(o, a) for a in attnames): o for o in model.objects.all()}
            self._tables[(model, names)] = table
        return table

    @staticmethod
    def _key(lookup: dict) -> tuple[tuple[str, ...], tuple]:
        names = tuple(sorted(lookup))
        return names, tuple(getattr(lookup[n], "pk", lookup[n]) for n in names)

    def get(self, model: type[models.Model], lookup: dict) -> models.Model | None:
        names, key = self._key(lookup)
        return self._table(model, names).get(key)

    def add(self, model: type[models.Model], lookup: dict, obj: models.Model) -> None:
        names, key = self._key(lookup)
        self._table(model, names)[key] = obj


@dataclass
class _Load:
    report: LoadReport
    rows: _Rows


def _sync(load: _Load, kind: str, model: type[models.Model], lookup: dict, values: dict):
    """Create or update one row, writing only when something differs."""
    report = load.report
    obj = load.rows.get(model, lookup)
    if obj is None:
        obj = model.objects.create(**lookup, **values)
        load.rows.add(model, lookup, obj)
        report.created[kind] += 1
        return obj, True
    dirty = [name for name, value in values.items() if _differs(_current(obj, name), value)]
    if dirty:
        for name in dirty:
            setattr(obj, name, values[name])
        obj.save(update_fields=dirty)
        report.updated[kind] += 1
    else:
        report.unchanged[kind] += 1
    return obj, False


def _current(obj: models.Model, name: str) -> Any:
    """A field's value as stored: a relation's id (reading the related row would cost a
    query per row and field)."""
    f = obj._meta.get_field(name)
    return getattr(obj, f.attname) if f.is_relation else getattr(obj, name)


def _differs(current: Any, new: Any) -> bool:
    if isinstance(new, models.Model):
        return current != new.pk
    if isinstance(current, Decimal) or isinstance(new, Decimal):
        return Decimal(str(current)) != Decimal(str(new))
    return current != new


def _require(entry: dict, key: str, where: str):
    if key not in entry:
        raise CatalogFileError(f"{where}: missing `{key}`.")
    return entry[key]


def read_catalog(path: Path | str = DEFAULT_CATALOG) -> dict:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError as exc:
        raise CatalogFileError(f"No catalog file at {path}.") from exc
    except tomllib.TOMLDecodeError as exc:
        raise CatalogFileError(f"{path} is not valid TOML: {exc}") from exc


@transaction.atomic
def catalog_load(
    *, path: Path | str = DEFAULT_CATALOG, reset_lifecycle: bool = False
) -> LoadReport:
    data = read_catalog(path)
    report = LoadReport()
    load = _Load(report, _Rows())
    tiers = {}
    for t in data.get("tiers", []):
        slug = _require(t, "slug", "tier")
        tiers[slug], _ = _sync(
            load,
            "tiers",
            Tier,
            {"slug": slug},
            {
                "name": _require(t, "name", f"tier {slug}"),
                "rank": _require(t, "rank", f"tier {slug}"),
                "price_multiplier": Decimal(str(_require(t, "price_multiplier", f"tier {slug}"))),
                "speed_vs_standard": t.get("speed_vs_standard", ""),
                "description": t.get("description", ""),
            },
        )
    for n in data.get("notice_policies", []):
        kind = _require(n, "kind", "notice policy")
        _sync(
            load,
            "notice policies",
            NoticePolicy,
            {"kind": kind},
            {
                "minimum_days": int(_require(n, "minimum_days", f"notice policy {kind}")),
                "description": n.get("description", ""),
            },
        )
    pools = {}
    for p in data.get("pools", []):
        slug = _require(p, "slug", "pool")
        pools[slug], _ = _sync(
            load,
            "pools",
            HardwarePool,
            {"slug": slug},
            {
                "name": _require(p, "name", f"pool {slug}"),
                "device": _require(p, "device", f"pool {slug}"),
                "nodes": _require(p, "nodes", f"pool {slug}"),
                "is_estimate": bool(p.get("estimate", False)),
            },
        )
    families = {}
    for f in data.get("families", []):
        slug = _require(f, "slug", "family")
        families[slug], _ = _sync(
            load,
            "families",
            ModelFamily,
            {"slug": slug},
            {"name": _require(f, "name", f"family {slug}"), "vendor": f.get("vendor", "")},
        )

    entries = data.get("models", [])
    versions: dict[str, ModelVersion] = {}
    created_slugs: set[str] = set()
    for m in entries:
        slug = _require(m, "slug", "model")
        where = f"model {slug}"
        arch = _require(m, "architecture", where)
        if "kv_heads" in arch or "head_dim" in arch or arch.get("kv_compressed"):
            try:  # KV bytes per token follow from the architecture; a typed value must agree
                arch = {**arch, "kv_bytes_per_token": round(architecture_kv_bytes(slug, arch))}
            except SimEngineError as exc:
                raise CatalogFileError(f"{where}: {exc}") from None
        family_slug = _require(m, "family", where)
        if family_slug not in families:
            raise CatalogFileError(f"{where}: unknown family `{family_slug}`.")
        values = {
            "name": _require(m, "name", where),
            "vendor": _require(m, "vendor", where),
            "family": families[family_slug],
            "kind": m.get("kind", ModelVersion.Kind.GENERAL),
            "context_window": _require(m, "context_window", where),
            "input_modalities": list(m.get("input_modalities", ["text"])),
            "total_params": int(arch["total_params"]),
            "active_params_prefill": int(arch["active_params_prefill"]),
            "active_params_decode": int(arch["active_params_decode"]),
            "layers": int(arch["layers"]),
            "hidden_size": int(arch["hidden_size"]),
            "bytes_per_param": float(arch["bytes_per_param"]),
            "kv_bytes_per_token": int(arch["kv_bytes_per_token"]),
            "architecture_is_estimate": bool(arch.get("estimate", True)),
            "estimated_fields": list(m.get("estimated", [])),
            "notes": m.get("notes", ""),
        }
        existing = load.rows.get(ModelVersion, {"slug": slug})
        if existing is None:
            # Created with its release date only; the rest of the lifecycle goes through
            # the lifecycle service below, validated and recorded.
            values["released_on"] = _require(m, "released_on", where)
        versions[slug], created = _sync(load, "models", ModelVersion, {"slug": slug}, values)
        if created:
            created_slugs.add(slug)

    for m in entries:
        slug = m["slug"]
        if slug not in created_slugs and not reset_lifecycle:
            continue
        successor_slug = m.get("successor")
        if successor_slug and successor_slug not in versions:
            raise CatalogFileError(f"model {slug}: unknown successor `{successor_slug}`.")
        tier_slug = m.get("successor_tier")
        if tier_slug and tier_slug not in tiers:
            raise CatalogFileError(f"model {slug}: unknown successor tier `{tier_slug}`.")
        try:
            model_update_lifecycle(
                model=versions[slug],
                actor="loadcatalog",
                reason=f"built-in catalog ({Path(path).name})",
                released_on=m["released_on"],
                generally_available_on=m.get("generally_available_on"),
                retirement_announced_on=m.get("retirement_announced_on"),
                retires_on=m.get("retires_on"),
                successor=versions.get(successor_slug) if successor_slug else None,
                successor_tier=tiers.get(tier_slug) if tier_slug else None,
            )
        except LifecycleError as exc:
            raise CatalogFileError(f"model {slug}: {exc}") from exc

    for m in entries:
        model = versions[m["slug"]]
        _load_model_children(load, m, model, tiers, pools)
    return report


def _load_model_children(
    load: _Load, m: dict, model: ModelVersion, tiers: dict, pools: dict
) -> None:
    where = f"model {model.slug}"
    prices = _require(m, "prices", where)
    deployments = m.get("deployments", [])
    for d in deployments:
        tier_slug, pool_slug = _require(d, "tier", where), _require(d, "pool", where)
        if tier_slug not in tiers or pool_slug not in pools:
            raise CatalogFileError(f"{where}: unknown tier or pool in deployment {d}.")
        _sync(
            load,
            "deployments",
            Deployment,
            {"model": model, "tier": tiers[tier_slug]},
            {"pool": pools[pool_slug], "available_from": d.get("since")},
        )
        # A price for every deployed tier: Standard price x the tier's multiplier.
        multiplier = tiers[tier_slug].price_multiplier
        _sync(
            load,
            "prices",
            Price,
            {"model": model, "tier": tiers[tier_slug]},
            {
                "input_per_million": (Decimal(str(prices["input"])) * multiplier).quantize(
                    Decimal("0.0001")
                ),
                "output_per_million": (Decimal(str(prices["output"])) * multiplier).quantize(
                    Decimal("0.0001")
                ),
                "is_estimate": bool(prices.get("estimate", True)),
            },
        )
    for b in m.get("benchmarks", []):
        _sync(
            load,
            "benchmarks",
            Benchmark,
            {
                "model": model,
                "name": _require(b, "name", where),
                "duration_minutes": b.get("duration_minutes"),
            },
            {"score": float(_require(b, "score", where)), "source": b.get("source", "")},
        )
    for s in m.get("speeds", []):
        tier_slug = _require(s, "tier", where)
        if tier_slug not in tiers:
            raise CatalogFileError(f"{where}: unknown tier `{tier_slug}` in speeds.")
        _sync(
            load,
            "speeds",
            PublishedSpeed,
            {"model": model, "tier": tiers[tier_slug]},
            {
                "tokens_per_second_low": float(s["low"]),
                "tokens_per_second_high": float(s["high"]),
                "note": s.get("note", ""),
            },
        )
