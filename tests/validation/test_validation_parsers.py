"""hping3 output, receiver counters and statistics, on outputs captured on this machine
(tests/validation/data) and on real NIC samples from ../shared/data/ethtool-samples."""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
from pathlib import Path

import pytest

from nictune.errors import InputError, RunError
from nictune.model import NicSetting
from nictune.plan import PlanEntry
from nictune.validation import counters, stats, traffic
from nictune.validation.remote import agent_result, ipv4_address, stop_agent_command

DATA = Path(__file__).with_name("data")


def capture(name: str) -> tuple[dict, traffic.TrafficSpec]:
    raw = json.loads((DATA / f"hping3-{name}.json").read_text())
    return raw, traffic.TrafficSpec(**raw["spec"])


def entry(**kw: object) -> PlanEntry:
    base = dict(id="t1", host="rx1", nic="n1", setting=NicSetting("active_wait"),
                default_setting=NicSetting("busy_poll"), packet_size=1400, rate_pps=3600.0,
                size_bytes=14_000_000.0)
    base.update(kw)
    return PlanEntry(**base)  # type: ignore[arg-type]


def test_spec_scales_count_and_paces_rate() -> None:
    spec = traffic.spec_for(entry(), "10.0.0.2", 20001, scale=0.01)
    assert (spec.count, spec.interval_us, spec.payload) == (100, 278, 1372)
    by_time = traffic.spec_for(entry(), "10.0.0.2", 20001, duration=2.0)
    assert by_time.count == 7200
    cmd = traffic.hping3_command(spec, "/tmp/x.pid")
    assert "hping3 --udp -q -p 20001 -d 1372 -c 100 -i u278 10.0.0.2" in cmd
    assert cmd.startswith("date +%s.%N;") and cmd.endswith("exit $rc")
    flood = traffic.hping3_command(traffic.flood_spec("t", "10.0.0.2", 9, 64, 2), "/tmp/x.pid")
    hping3 = flood.split("timeout -s INT 2 hping3", 1)[1]
    assert "--flood" in hping3 and " -c " not in hping3


@pytest.mark.parametrize("kw, msg", [
    ({"scale": 0.0}, "--scale"), ({"scale": 2.0}, "--scale"), ({"duration": -1.0}, "--duration"),
])
def test_spec_rejects_bad_options(kw: dict, msg: str) -> None:
    with pytest.raises(InputError, match=msg):
        traffic.spec_for(entry(), "10.0.0.2", 1, **kw)


def test_spec_needs_size_or_duration() -> None:
    with pytest.raises(InputError, match="size_bytes"):
        traffic.spec_for(entry(size_bytes=0.0), "10.0.0.2", 1, scale=0.5)
    with pytest.raises(InputError, match="rate_pps"):
        traffic.spec_for(entry(rate_pps=0.0), "10.0.0.2", 1, duration=1.0)


@pytest.mark.parametrize("kw, duration, msg", [
    ({"rate_pps": 5e-324}, 1.0, "further apart than hping3 can"),  # (OverflowError)
    ({"rate_pps": 1e-4}, 1.0, "further apart than hping3 can"),
    ({"rate_pps": 1e308}, 10.0, "more than hping3 sends in one run"),  # (OverflowError)
    ({"size_bytes": 1e300}, None, "more than hping3 sends in one run"),  # (a 294-digit -c)
    ({"rate_pps": float("nan")}, 1.0, "rate_pps must be > 0"),
])
def test_spec_refuses_what_hping3_cannot_send(kw: dict, duration: float | None,
                                              msg: str) -> None:
    """hping3 reads -c and -i uN as C ints: -c 4294967297 sent one packet."""
    with pytest.raises(InputError, match=msg):
        traffic.spec_for(entry(**kw), "10.0.0.2", 1, duration=duration)
    assert traffic.spec_for(entry(rate_pps=1.0), "10.0.0.2", 1, duration=60.0).count == 60


def test_parse_real_count_run() -> None:
    raw, spec = capture("count")
    res = traffic.parse_hping3(raw["stdout"], raw["stderr"], raw["rc"], spec)
    assert res.transmitted == 500 and res.bytes_sent == 500 * 1400
    assert res.wall_s > traffic.LINGER_S
    assert res.duration_s == pytest.approx(res.wall_s - traffic.LINGER_S)
    assert 0 < res.rate_pps <= 1e6 / spec.interval_us * 1.05  # hping3 never beats its pace


def test_parse_real_flood_run() -> None:
    raw, spec = capture("flood")
    assert raw["rc"] == 124  # timeout(1) stopped it, as intended
    res = traffic.parse_hping3(raw["stdout"], raw["stderr"], raw["rc"], spec)
    assert res.transmitted > 1000 and res.duration_s == pytest.approx(res.wall_s)


def test_no_replies_is_not_a_failure() -> None:
    raw, spec = capture("count")
    stderr = raw["stderr"].replace(", 5 packets received", ", 0 packets received")
    assert ", 0 packets received" in stderr
    assert traffic.parse_hping3(raw["stdout"], stderr, 1, spec).transmitted == 500
    with pytest.raises(RunError, match="exited with 1"):
        traffic.parse_hping3(raw["stdout"], raw["stderr"], 1, spec)


@pytest.mark.parametrize("name, reason", [("unreachable", "output interface"),
                                          ("badhost", "Unable to resolve")])
def test_failed_runs_raise_with_hping3s_reason(name: str, reason: str) -> None:
    raw, spec = capture(name)
    with pytest.raises(RunError, match=reason):
        traffic.parse_hping3(raw["stdout"], raw["stderr"], raw["rc"], spec)


def test_veth_counters_from_a_real_capture() -> None:
    raw = veth_snapshot()
    d = counters.delta(raw["before"], raw["after"], raw["iface"])
    assert d.nic_interrupts is None  # a veth has no IRQ lines
    assert d.rx_packets is not None and d.rx_packets >= raw["packets"]
    assert d.rx_bytes is not None and d.rx_bytes >= raw["packets"] * 500
    assert d.rx_drop == 0 and d.nic_drops == 0 and d.drops_before_ring == 0
    assert d.net_rx_softirqs > 0 and d.host_interrupts > 0 and d.context_switches > 0
    assert d.cpu_busy_s >= 0


@pytest.mark.parametrize("sample, iface, irqs, line", [
    ("virtio_net__proc-interrupts__1.txt", "eth0", ("24", "25", "26"), "25"),
    ("mlx5_core__proc-interrupts__2.txt", "enp1s0f0", ("27", "28", "29"), "28"),
])
def test_nic_interrupts_count_the_lines_the_probe_found(shared: Path, sample: str, iface: str,
                                                        irqs: tuple[str, ...], line: str
                                                        ) -> None:
    """virtio_net's and mlx5's lines (virtio0-input.0, mlx5_comp0@pci:…) do not carry the
    interface's name: the count takes the probe's lines. By the name alone they were
    n/a in the report."""
    text = (shared / "data" / "ethtool-samples" / sample).read_text()
    raw = veth_snapshot()
    before = {**raw["before"], "/proc/interrupts": text}
    after = {**raw["after"], "/proc/interrupts": re.sub(rf"(?m)^(\s*{line}:\s+)([0-9]+)",
                                        lambda m: m.group(1) + str(int(m.group(2)) + 1000),
                                        text, count=1)}
    assert after["/proc/interrupts"] != text
    assert counters.delta(before, after, iface).nic_interrupts is None
    assert counters.delta(before, after, iface, irqs=irqs).nic_interrupts == 1000


@pytest.mark.parametrize("source", counters.REQUIRED)
def test_a_proc_source_the_agent_could_not_read_is_an_error_not_zero(source: str) -> None:
    """The agent stores "" for a file it cannot read: its counts came out as measured
    zeros in the report (a review's case)."""
    raw = veth_snapshot()
    with pytest.raises(RunError, match=f"{source} could not be read on the receiver"):
        counters.delta({**raw["before"], source: ""}, raw["after"], raw["iface"])


def veth_snapshot() -> dict:
    return json.loads((DATA / "veth-counters.json").read_text())


@pytest.mark.parametrize("source, line, garbled, message", [
    ("/proc/softirqs", "NET_RX:   58454301   51335366", "NET_RX:   58454301   ab",
     "/proc/softirqs: NET_RX: expected a count, got 'ab'"),
    ("/proc/softirqs", "NET_RX:   58454301   51335366", "NET_RX:   58454301",
     "/proc/softirqs: NET_RX: 1 of 2 CPU counts"),
    ("/proc/stat", "ctxt 1060141", "ctxt", "/proc/stat: ctxt: no value"),
    ("/proc/stat", "ctxt 1060141", "ctxt 10601x", "/proc/stat: ctxt: expected a count"),
    ("/proc/net/dev", "vb5873: 56350358554 109758871    0    0",
     "vb5873: 56350358554 109758871\n", "/proc/net/dev: vb5873: 2 counters, expected 16"),
    ("/proc/net/dev", "vb5873: 56350358554", "vb5873: 5635035855x",
     "/proc/net/dev: vb5873: expected a count, got '5635035855x'"),
])
def test_malformed_snapshots_raise_one_line_run_errors(source: str, line: str, garbled: str,
                                                       message: str) -> None:
    """A truncated or garbled /proc file from the receiver is a failed run with a message
    naming the file and the line, never a ValueError/IndexError/KeyError traceback."""
    raw = veth_snapshot()
    text = raw["after"][source]
    assert line in text
    if garbled.endswith("\n"):  # cut the line after `garbled`
        start = text.index(line)
        text = text[:start] + garbled + text[text.index("\n", start) + 1:]
    else:
        text = text.replace(line, garbled)
    with pytest.raises(RunError) as err:
        counters.delta(raw["before"], {**raw["after"], source: text}, raw["iface"])
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_nic_interrupt_line_with_a_missing_cpu_count_is_an_error(shared: Path) -> None:
    text = (shared / "data" / "ethtool-samples" / "igb__proc-interrupts__1.txt").read_text()
    cut = text.replace("2819389       4036", "2819389")  # eth0-rx-1 lost its CPU1 column
    with pytest.raises(RunError, match=r"^/proc/interrupts: IRQ 59: 3 of 4 CPU counts$"):
        counters.parse_interrupts(cut, "eth0")
    assert counters.parse_interrupts(cut, "eth1")  # whole lines of other NICs still read


def test_drops_are_receive_only_and_counted_once() -> None:
    """virtio_net (ethtool -S captured on this project's test machine: ethtool 6.1, kernel
    6.18) counts one receive drop in rx_drops and again in rx0_drops, and /proc/net/dev
    counts it too: 7 drops stay 7. Summing every matching counter made 7 drops 38 in the
    review; tx counters never count."""
    stats = (DATA / "virtio_net-ethtool-S.txt").read_text()
    bumped = stats
    for key, n in (("rx_drops", 7), ("rx0_drops", 7), ("tx_xdp_tx_drops", 3),
                   ("tx0_xdp_tx_drops", 3)):
        bumped = re.sub(rf"(?m)^(\s+{key}: )0$", rf"\g<1>{n}", bumped)
    dev = "  eth0: 100 2 0 {} 0 0 0 0 5 1 0 0 0 0 0 0\n"
    raw = veth_snapshot()  # (its /proc sources: every snapshot has them)
    d = counters.delta({**raw["before"], "ethtool -S": stats, "/proc/net/dev": dev.format(0)},
                       {**raw["after"], "ethtool -S": bumped, "/proc/net/dev": dev.format(7)},
                       "eth0")
    assert d.ethtool == {"rx_drops": 7, "rx0_drops": 7, "tx_xdp_tx_drops": 3,
                         "tx0_xdp_tx_drops": 3}
    assert (d.rx_drop, d.nic_drops, d.drops_before_ring) == (7, 7, 7)


def test_per_queue_drops_count_where_the_driver_has_no_aggregate() -> None:
    raw = veth_snapshot()  # a veth has only rx_queue_N_* counters
    stats = raw["after"]["ethtool -S"].replace("rx_queue_0_drops: 0", "rx_queue_0_drops: 4")
    d = counters.delta(raw["before"], {**raw["after"], "ethtool -S": stats}, raw["iface"])
    assert (d.rx_drop, d.nic_drops, d.drops_before_ring) == (0, 4, 4)


def test_nic_drops_prefers_an_aggregate_and_skips_non_drops() -> None:
    """igb/ixgbe counter names: rx_fifo_errors is the sum of the rx_queue_N_drops,
    rx_no_buffer_count counts descriptor stalls (the packet still arrives), fdir_miss a
    flow-director lookup."""
    igb = {"rx_no_buffer_count": 50, "rx_missed_errors": 3, "rx_fifo_errors": 4,
           "rx_queue_0_drops": 2, "rx_queue_1_drops": 2, "tx_dropped": 9, "fdir_miss": 11}
    assert counters.nic_drops(igb) == 4
    assert counters.nic_drops({"rx_queue_0_drops": 2, "rx_queue_1_drops": 3}) == 5
    assert counters.nic_drops({"tx_dropped": 9, "rx_packets": 5}) is None


@pytest.mark.parametrize("sample, iface, lines", [
    ("igb__proc-interrupts__1.txt", "eth0", None),
    ("ixgbe__proc-interrupts__1.txt", None, None),
    ("i40e__proc-interrupts__1.txt", None, None),
])
def test_interrupt_lines_of_real_nics(shared: Path, sample: str, iface: str | None,
                                      lines: int | None) -> None:
    text = (shared / "data" / "ethtool-samples" / sample).read_text()
    names = [x.split()[-1] for x in text.splitlines()[1:] if x.split()]
    nic = iface or next(n.split("-")[0] for n in names if "-TxRx-" in n or "-rx-" in n
                        or "-TxRx" in n)
    found = counters.parse_interrupts(text, nic)
    assert found, f"no lines for {nic}"
    expected = [x for x in text.splitlines()[1:] if nic in x.split()[-1]]
    assert len(found) == len(expected)
    ncpu = len(text.splitlines()[0].split())
    assert all(len(counts) == ncpu for counts in found.values())


def test_per_cpu_counts_wrap_at_32_bits(shared: Path) -> None:
    """/proc/interrupts and /proc/softirqs count in 32 bits per CPU: a CPU whose counter
    wrapped during the capture still adds its increase (summing over CPUs first gave a
    delta near -2**32)."""
    after = (shared / "data" / "ethtool-samples" / "igb__proc-interrupts__1.txt").read_text()
    before = after.replace("4251905", "4294967000")  # eth0-rx-0, CPU0
    raw = veth_snapshot()
    softirqs = {
        "before": raw["before"]["/proc/softirqs"].replace("58454301", "4294967200"),
        "after": raw["after"]["/proc/softirqs"].replace("58454301", "100")}
    d = counters.delta({**raw["before"], "/proc/interrupts": before,
                        "/proc/softirqs": softirqs["before"]},
                       {**raw["after"], "/proc/interrupts": after,
                        "/proc/softirqs": softirqs["after"]}, "eth0")
    assert d.nic_interrupts == 4251905 + 2**32 - 4294967000
    assert d.net_rx_softirqs == (100 + 2**32 - 4294967200) + (51335366 - 51335066)


def test_interrupts_by_irq_number_and_absent_nic(shared: Path) -> None:
    text = (shared / "data" / "ethtool-samples" / "mlx5_core__proc-interrupts__1.txt").read_text()
    found = counters.parse_interrupts(text, "ens1f0", irqs=("99", "109"))
    assert found is not None and {k: sum(v) for k, v in found.items()} == {
        "99": 324 + 4360, "109": 2 + 395218}
    assert found["109"][8] == 395218 and len(found["109"]) == 12  # per CPU, no header line
    assert counters.parse_interrupts(text, "ens1f0") is None


def test_ethtool_stats_and_net_dev() -> None:
    text = "NIC statistics:\n     rx_packets: 12\n     rx_missed_errors: 3\n     x: n/a\n"
    assert counters.parse_ethtool_stats(text) == {"rx_packets": 12, "rx_missed_errors": 3}
    dev = ("Inter-| Receive\n face |bytes packets\n  eth0: 100 2 0 1 0 0 0 0 5 1 0 0 0 0 0 0\n")
    assert counters.parse_net_dev(dev, "eth0") == {
        "rx_bytes": 100, "rx_packets": 2, "rx_errs": 0, "rx_drop": 1, "rx_fifo": 0,
        "rx_frame": 0}
    assert counters.parse_net_dev(dev, "eth1") is None


def test_summary_confidence_interval() -> None:
    s = stats.summarize([10.0, 12.0, 11.0, 13.0, 9.0])
    assert s.mean == pytest.approx(11.0) and s.sd == pytest.approx(math.sqrt(2.5))
    assert s.half_width == pytest.approx(2.776445 * math.sqrt(2.5) / math.sqrt(5), rel=1e-5)
    one = stats.summarize([4.0])
    assert one.mean == 4.0 and math.isnan(one.half_width)  # one value has no interval


def test_welch_matches_textbook_and_labels() -> None:
    a = [19.1, 20.0, 20.5, 19.7, 20.2]
    b = [21.0, 22.4, 21.7, 22.9, 21.5]
    c = stats.compare("throughput", a, b)
    va, vb = stats.summarize(a).sd ** 2 / 5, stats.summarize(b).sd ** 2 / 5
    assert c.t == pytest.approx((sum(b) - sum(a)) / 5 / math.sqrt(va + vb))
    assert c.significant and c.verdict == "improvement" and c.p_value < 0.01
    assert c.change_ci[0] < c.change < c.change_ci[1]
    flat = stats.compare("throughput", a, [x + 0.05 for x in reversed(a)])
    assert not flat.significant and flat.verdict == "no significant difference"
    fewer = stats.compare("interrupts", [100.0, 110, 105], [10.0, 12, 11],
                          higher_is_better=False)
    assert fewer.verdict == "improvement" and fewer.change < -0.8
    worse = stats.compare("throughput", b, a)
    assert worse.verdict == "regression"


def test_agent_copies_of_model_constants_agree(tmp_path: Path) -> None:
    """agent.py is shipped alone (stdlib only), so it restates the modes and PF_RING's
    defaults; they must not drift from nictune.model's."""
    from nictune import model
    from nictune.validation import agent

    assert agent.MODES == model.MODES
    (tmp_path / "none.json").write_text("{}")  # a profile that sets nothing
    args = agent.parse_args(["--iface", "lo", "--port", "9", "--mode", "watermark",
                             "--profile", str(tmp_path / "none.json")])
    assert (args.ring_slots, args.watermark, args.watermark_timeout) == (
        model.PFRING_SLOTS, model.PFRING_WATERMARK, model.PFRING_POLL_DURATION)


@pytest.mark.parametrize(("text", "message"), [
    ("not json", "wrote no JSON"), ("[" * 100_000, "wrote no JSON"),
    ("5", "no JSON object"), ("null", "no JSON object"), ('"x"', "no JSON object"),
    ("{}", "has no counters_before"),
    ('{"error": "no such device"}', "agent failed: no such device"),
])
def test_the_agents_result_must_be_an_object_with_its_counters(text: str, message: str) -> None:
    """A review fed these as the agent's output: TypeError, KeyError and RecursionError
    tracebacks from `validate` and `calibrate`."""
    with pytest.raises(RunError, match=f"^rx1: .*{re.escape(message)}"):
        agent_result("rx1", text)
    assert agent_result("rx1", json.dumps({**GOOD_RESULT, "x": 1}))["x"] == 1


# the fields `derive` and the report read, as the agent writes them
GOOD_RESULT = {"counters_before": {"/proc/stat": "cpu 1 2 3"}, "counters_after": {},
               "packets": 2, "bytes": 3000, "wakeups": 1, "empty_wakeups": 0,
               "ring_drops": 0, "stranded": 0, "context_switches": 4, "cpu_s": 0.01,
               "first_arrival": 1.5, "last_arrival": 1.6, "last_delivery": None,
               "backend": "af_packet", "notes": [], "ring": {"ring": "tpacket_v3"}}


@pytest.mark.parametrize(("field", "value"), [
    ("counters_before", []), ("counters_after", {"/proc/stat": 5}), ("packets", "x"),
    ("packets", -1), ("packets", True), ("bytes", 1.5), ("cpu_s", float("nan")),
    ("first_arrival", "soon"), ("last_delivery", -2.0), ("backend", None), ("notes", {}),
    ("ring", 3),
])
def test_a_malformed_agent_result_is_one_line(field: str, value: object) -> None:
    """A review's agent wrote `"counters_before": []`: an AttributeError traceback from
    `validate` after the run (KeyError, TypeError likewise for the numbers)."""
    text = json.dumps({**GOOD_RESULT, field: value})
    with pytest.raises(RunError, match=f"^rx1: the agent's result has a malformed {field}"):
        agent_result("rx1", text)
    pfring = {**GOOD_RESULT, "empty_wakeups": None, "stranded": None, "backend": "pfring"}
    assert agent_result("rx1", json.dumps(pfring))["stranded"] is None  # not observable
    text = json.dumps({k: v for k, v in GOOD_RESULT.items() if k != field})
    if field not in ("counters_before", "counters_after"):
        with pytest.raises(RunError, match=f"malformed {field}|no {field}"):
            agent_result("rx1", text)


def test_the_receivers_address_from_ip_addr() -> None:
    """It goes to hping3 on the sender as its target: what follows `inet` must be an
    IPv4 address (a host printing `inet --version/24` made hping3 take an option)."""
    real = ("3: veth0    inet 10.250.1.2/24 scope global veth0\\       valid_lft forever "
            "preferred_lft forever\n")
    assert ipv4_address(real) == "10.250.1.2"
    assert ipv4_address("") == ""
    with pytest.raises(RunError, match="'--version/24' as an IPv4 address"):
        ipv4_address("3: veth0    inet --version/24 scope global veth0\n")


def test_stopping_the_agent_reads_its_ready_file_as_a_pid_only(tmp_path: Path) -> None:
    """The clean-up ran `kill $(cat READY)`: a ready file holding `-l` listed the signals,
    one holding `-9 -1` (or, after `--`, `-1`) would have killed every process; `0` the
    caller's process group, `1` init (reviews)."""
    ready = tmp_path / "run.ready"
    ready.write_text("-l")
    res = subprocess.run(["sh", "-c", stop_agent_command(str(ready))], capture_output=True,
                         text=True)
    assert "HUP" not in res.stdout and not ready.exists()
    # `kill -- -1` is every process (a review): anything but digits is not passed at all;
    # kill is a function here that only records its arguments
    log = tmp_path / "kill.log"
    for content in ("-1", "-9 -1", "12 34", "", "$(id)", "0", "00", "0000000001", "1\n"):
        ready.write_text(content)
        subprocess.run(["sh", "-c", f'kill() {{ echo "$@" >> {log}; }}; '
                        + stop_agent_command(str(ready))], check=True)
        assert not log.exists() and not ready.exists(), content
    sleeper = subprocess.Popen(["sleep", "60"])
    ready.write_text(str(sleeper.pid))
    subprocess.run(["sh", "-c", stop_agent_command(str(ready))], check=True)
    assert sleeper.wait(timeout=10) == -signal.SIGTERM and not ready.exists()


def test_findings_say_a_note_of_one_arm_for_that_arm_only() -> None:
    """A note listed twice for one arm was said for 'both arms' (a review)."""
    from nictune.validation import report

    note = {"backend": "ethtool_coalesce", "kind": "unsupported", "detail": "rx-usecs"}
    lines = report._deploy_notes({"not_applied": {"default": [note, note], "optimized": []}})
    assert lines == ["  - default: ethtool_coalesce unsupported: rx-usecs"]
