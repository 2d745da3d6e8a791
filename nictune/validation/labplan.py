"""A plan for chosen settings without running the optimizer (tests, benchmarks, what-ifs).

`plan_for(config, {tid: setting})` gives the same `Plan` the optimizer would write for
those settings — hosts, NICs, sizes, rates, each transmission's default and the model's
predictions for both — so `nictune validate` can measure any hand-picked setting.
"""

from __future__ import annotations

from collections.abc import Mapping

from nictune.model import Config, NicSetting
from nictune.plan import Plan, PlanEntry
from nictune.simulator import simulate


def plan_for(config: Config, settings: Mapping[str, NicSetting],
             engine: str = "fast") -> Plan:
    """A plan that sets each named transmission to its setting (predictions by `engine`)."""
    chosen = [config.transmission(tid) for tid in settings]
    defaults = {t.id: config.default_setting(t) for t in chosen}
    predicted_default = {m.transmission: m.to_json()
                         for m in simulate(config, defaults, engine=engine)}
    predicted_opt = {m.transmission: m.to_json()
                     for m in simulate(config, dict(settings), engine=engine)}
    entries = [PlanEntry(
        id=t.id, host=config.nic_of(t).host, nic=t.nic, setting=settings[t.id],
        default_setting=defaults[t.id], packet_size=t.packet_size, rate_pps=t.rate,
        size_bytes=t.size,
        predicted={"default": predicted_default[t.id], "optimized": predicted_opt[t.id]})
        for t in chosen]
    return Plan(entries=entries, config=config.source, config_hash=config.digest,
                meta={"engine": engine, "source": "nictune.validation.labplan"})
