"""Deploy benchmark on the netns lab (root): wall time of a plan pushed to 20 hosts, and
randomised fault trials proving no host is left half-configured and no snapshot is lost.

    .venv/bin/python benchmarks/bench_deploy.py [--hosts 20] [--trials 50] [--seed 1]

Part 1 builds a lab of a sender + 20 receivers and times `nictune deploy` (the command,
Python start-up included), the idempotent re-deploy and `nictune rollback` (goal: deploy
≤ 10 s wall). Part 2 runs trials on a 4-host lab; each trial deploys a random plan to the
receivers while injecting one fault at a random moment:

* `none`: no fault;
* `sshd-kill`: the receiver's sshd and sessions are SIGKILLed 0-0.8 s into the deploy;
* `link-down`: the receiver's management link (mgmt0) goes down 0-0.8 s into the deploy
  (the session hangs; the command timeout ends it) and comes back after the timer;
* `write-fail`: the receiver's capture-profile directory is immutable (`chattr +i`), so
  the last knob write fails after the others were applied.

After the on-host timers ran, each receiver is read back independently of nictune (sysfs,
ethtool, files). It must equal either its state before the trial or the state a clean
deploy of the same plan gives — anything else counts as half-configured. The trial ends
with `rollback`, which must return every host to its pre-trial state (else the snapshot
counts as lost).
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from nictune.argtypes import count
from nictune.deploy.group import run_group
from nictune.deploy.inventory import HostInventory, load_inventory
from nictune.deploy.lab import Lab, LabUnavailable, check_lab_possible, lab_hosts
from nictune.deploy.transaction import Options, apply_host, resolve_host, restore_host
from nictune.deploy.transport import Connection
from nictune.model import NicSetting

REPO = Path(__file__).resolve().parents[1]
NICTUNE = [sys.executable, "-m", "nictune"]
FAULTS = ("none", "sshd-kill", "link-down", "write-fail")
GUARD = 10.0


def random_setting(rng: random.Random, cpus: int) -> NicSetting:
    ring = 2 ** rng.randint(8, 13)
    mode = rng.choice(("active_wait", "passive_wait", "watermark", "busy_poll"))
    core = rng.randrange(cpus)
    if mode == "passive_wait":
        return NicSetting(mode, ring_slots=ring, irq_core=core,
                          poll_interval=round(rng.uniform(10e-6, 5e-3), 6))
    if mode == "watermark":
        return NicSetting(mode, ring_slots=ring, irq_core=core,
                          watermark=rng.randint(1, ring // 2),
                          watermark_timeout=rng.choice((0.0, round(rng.uniform(0, 0.01), 6))))
    return NicSetting(mode, ring_slots=ring, irq_core=core)


def timed(args: list[str]) -> tuple[float, int]:
    started = time.perf_counter()
    rc = subprocess.run(NICTUNE + args, cwd=REPO, capture_output=True, text=True).returncode
    return time.perf_counter() - started, rc


def part_scale(hosts: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="nictune-bench-") as tmp:
        started = time.perf_counter()
        with lab_hosts(Path(tmp) / "lab", hosts=hosts + 1) as lab:
            up = time.perf_counter() - started
            plan = lab.write_plan(Path(tmp) / "plan.yaml", {
                h.name: random_setting(rng, 2) for h in lab.hosts[1:]})
            inv = str(lab.inventory)
            deploy, rc1 = timed(["deploy", str(plan), "--inventory", inv, "--workers", "20"])
            again, rc2 = timed(["deploy", str(plan), "--inventory", inv, "--workers", "20"])
            back, rc3 = timed(["rollback", "--inventory", inv, "--workers", "20"])
        return {"hosts": hosts, "lab_up_s": up, "deploy_s": deploy, "redeploy_s": again,
                "rollback_s": back, "exit_codes": (rc1, rc2, rc3)}


def read_state(lab: Lab, host: str) -> tuple[Any, ...]:
    """A receiver's knobs as the kernel and files show them (independent of nictune)."""
    sysfs = "/sys/class/net/veth0"
    out = lab.exec(host, ["sh", "-c", f"cat {sysfs}/gro_flush_timeout "
                          f"{sysfs}/napi_defer_hard_irqs {sysfs}/queues/rx-0/rps_cpus; "
                          "ethtool -k veth0 | grep '^generic-receive-offload'"]).stdout
    root = Path(lab.host(host).root)
    files = tuple((root / rel).read_text() if (root / rel).exists() else None
                  for rel in ("etc/pf_ring/pf_ring.conf", "etc/nictune/capture/veth0.json"))
    return (*out.split(), *files)


def wait_timers(lab: Lab, hosts: list[str], limit: float) -> list[str]:
    """Wait until no timer is armed and every fired timer's restore finished; the hosts
    where that did not happen within `limit` s (a problem: a timer that never fires)."""
    deadline = time.monotonic() + limit
    late = []
    for h in hosts:
        d = Path(lab.host(h).root) / "var/lib/nictune"
        while (d / "armed").exists() or ((d / "fired").exists() and
                                          not (d / "restore.rc").exists()):
            if time.monotonic() > deadline:
                late.append(h)
                break
            time.sleep(0.05)
    return late


def inject(lab: Lab, fault: str, host: str, delay: float) -> threading.Thread | None:
    if fault == "write-fail":  # immutable dir; on tmpfs a file where the dir should be
        capture = Path(lab.host(host).root) / "etc/nictune/capture"
        capture.mkdir(parents=True, exist_ok=True)
        if subprocess.run(["chattr", "+i", str(capture)], capture_output=True).returncode:
            capture.rmdir()
            capture.write_text("in the way\n")
        return None
    if fault == "none":
        return None

    def act() -> None:
        time.sleep(delay)
        if fault == "sshd-kill":
            lab.kill_sshd(host)
        else:
            lab.exec(host, ["ip", "link", "set", "mgmt0", "down"])

    thread = threading.Thread(target=act)
    thread.start()
    return thread


def heal(lab: Lab, fault: str, host: str) -> None:
    if fault == "write-fail":
        capture = Path(lab.host(host).root) / "etc/nictune/capture"
        if capture.is_file():
            capture.unlink()
        else:
            subprocess.run(["chattr", "-i", str(capture)], check=True)
    elif fault == "sshd-kill":
        lab.start_sshd(host)
    elif fault == "link-down":
        lab.exec(host, ["ip", "link", "set", "mgmt0", "up"])
        lab.exec(host, ["ip", "route", "replace", f"{lab.hosts[0].address.rsplit('.', 1)[0]}"
                        ".254/32", "dev", "mgmt0"])


def resolve(inv_hosts: list[HostInventory], outcomes: dict[str, Any]) -> int:
    """Ask the hosts about results that said "unknown" (session lost mid-disarm); the
    settled result replaces the report. Returns how many were unknown."""
    unknown = [h for h in inv_hosts if outcomes[h.name].value is not None
               and outcomes[h.name].value.status == "unknown"]

    def one(host: HostInventory) -> Any:
        with Connection(host) as conn:
            return resolve_host(conn, outcomes[host.name].value)

    for h, settled in run_group(unknown, one).outcomes.items():
        if settled.ok:
            outcomes[h] = settled
    return len(unknown)


def deploy_all(inv_hosts: list[HostInventory], settings: dict[str, NicSetting],
               timeout: float = 5.0) -> dict[str, Any]:
    def one(host: HostInventory) -> Any:
        with Connection(host, command_timeout=timeout) as conn:
            return apply_host(conn, host, {f"{host.name}-veth0": settings[host.name]},
                              Options(guard_timeout=GUARD))

    return run_group(inv_hosts, one).outcomes


def part_faults(trials: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    tally: dict[str, Any] = {"trials": 0, "half_configured": 0, "snapshots_lost": 0,
                             "inconsistent_reports": 0, "unverified": 0, "unknown": 0,
                             "faults": {f: 0 for f in FAULTS},
                             "host_outcomes": {"applied": 0, "restored": 0}, "problems": []}
    with tempfile.TemporaryDirectory(prefix="nictune-faults-") as tmp, \
            lab_hosts(Path(tmp) / "lab", hosts=4) as lab:
        inventory = load_inventory(lab.inventory)
        receivers = [h.name for h in lab.hosts[1:]]
        hosts = [inventory.hosts[h] for h in receivers]
        for trial in range(trials):
            pre = {h: read_state(lab, h) for h in receivers}
            settings = {h: random_setting(rng, 2) for h in receivers}
            fault, victim = FAULTS[trial % len(FAULTS)], rng.choice(receivers)
            tally["faults"][fault] += 1
            thread = inject(lab, fault, victim, rng.uniform(0.0, 0.8))
            outcomes = deploy_all(hosts, settings)
            if thread:
                thread.join()
            late = wait_timers(lab, receivers, GUARD + 6)
            for h in late:
                tally["problems"].append(f"trial {trial + 1} {fault} {h}: the on-host timer "
                                         "was still armed after the guard timeout")
            heal(lab, fault, victim)
            tally["unknown"] += resolve(hosts, outcomes)
            post = {h: read_state(lab, h) for h in receivers}
            clean = deploy_all(hosts, settings)  # the fully applied state, for comparison
            for _ in range(3):  # a healed link may need a moment
                if all(o.ok for o in clean.values()):
                    break
                time.sleep(1.0)
                clean = deploy_all(hosts, settings)
            target = {h: read_state(lab, h) for h in receivers}
            for h in receivers:
                reported_ok = outcomes[h].ok
                if not clean[h].ok:
                    tally["problems"].append(f"trial {trial + 1} {fault} {h}: the clean deploy "
                                             f"failed: {clean[h].error}")
                    tally["unverified"] += 1
                    continue
                if post[h] == pre[h]:
                    state = "restored"
                elif post[h] == target[h]:
                    state = "applied"
                else:
                    tally["half_configured"] += 1
                    tally["problems"].append(f"trial {trial + 1} {fault} {h}: half-configured")
                    continue
                tally["host_outcomes"][state] += 1
                if reported_ok != (state == "applied"):
                    tally["inconsistent_reports"] += 1
                    tally["problems"].append(f"trial {trial + 1} {fault} {h}: reported "
                                             f"ok={reported_ok} but {state}")
            back = run_group(hosts, lambda host: _rollback(host))
            for h in receivers:
                if not back.outcomes[h].ok or read_state(lab, h) != pre[h]:
                    tally["snapshots_lost"] += 1
                    tally["problems"].append(f"trial {trial + 1} {fault} {h}: rollback did not "
                                             f"restore ({back.outcomes[h].error})")
            tally["trials"] += 1
            statuses = [outcomes[h].value.status if outcomes[h].value else "failed"
                        for h in receivers]
            print(f"  trial {trial + 1:3d}/{trials} {fault:<10} victim {victim}: {statuses}",
                  flush=True)
    return tally


def _rollback(host: HostInventory) -> Any:
    with Connection(host) as conn:
        return restore_host(conn, host, Options(guard_timeout=GUARD))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=count(1), default=20,
                        help="receivers of the timed deploy (default 20)")
    parser.add_argument("--trials", type=count(0), default=50,
                        help="fault trials on the 4-host lab (default 50)")
    parser.add_argument("--seed", type=count(0), default=1,
                        help="seed of the plans, faults and their moments (default 1)")
    args = parser.parse_args()
    try:
        check_lab_possible()
    except LabUnavailable as exc:
        print(f"bench_deploy: skipped: {exc}")
        return 0
    scale = part_scale(args.hosts, args.seed)
    print(f"lab up ({scale['hosts'] + 1} hosts): {scale['lab_up_s']:.1f} s")
    print(f"deploy to {scale['hosts']} hosts: {scale['deploy_s']:.2f} s wall (goal <= 10 s); "
          f"re-deploy (no change): {scale['redeploy_s']:.2f} s; rollback: "
          f"{scale['rollback_s']:.2f} s; exit codes {scale['exit_codes']}")
    faults = part_faults(args.trials, args.seed)
    print(f"fault trials: {faults['trials']} ({faults['faults']}); host outcomes "
          f"{faults['host_outcomes']}; half-configured hosts: {faults['half_configured']}; "
          f"snapshots lost: {faults['snapshots_lost']}; inconsistent reports: "
          f"{faults['inconsistent_reports']}; unverified: {faults['unverified']}; "
          f"reported unknown, then resolved by read-back on reconnect: {faults['unknown']}")
    for problem in faults["problems"]:
        print(f"  PROBLEM {problem}")
    ok = scale["exit_codes"] == (0, 0, 0) and not faults["problems"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
