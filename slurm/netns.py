"""Hosts on one machine: each a network namespace with its own address, hostname and hosts file, on one bridge.

    net = netns.create("sl3f2a", ["ctl", "n1", "n2"], workdir)   # a free private /24, namespaces, veths, bridge
    argv = net.enter("n1", ["slurmd", "-f", conf])                 # run a command as host n1 (its own UTS and
                                                                   # mount namespace: hostname n1, /etc/hosts)
    net.limit("100mbit")                                           # every host's link shaped by tbf
    net.destroy()                                                  # namespaces, links and bridge removed

Traffic stays on this machine (slurm/README.md: a /24 nothing here uses, no default route, no uplink). A namespace's
name starts with the cluster's tag, so two clusters coexist. Needs root and iproute2.
"""
from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

# Where the /24 is looked for: 10.213.0.0/24 ... 10.213.255.0/24, the first that nothing here uses.
SEARCH_SPACE = ipaddress.ip_network("10.213.0.0/16")
BRIDGE_HOST = 254  # the root namespace's address on the bridge (the Slurm clients', never a target)


class NetnsError(RuntimeError):
    """Namespaces could not be made or removed; the message is one line."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise NetnsError(f"`ip {' '.join(args)}` failed: {(r.stderr or r.stdout).strip()}")
    return r


def unavailable() -> str | None:
    """None when namespace hosts can be made here, else a one-line reason."""
    if os.geteuid() != 0:
        return "namespace hosts need root (ip netns, veth, bridge)"
    for tool in ("ip", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (iproute2 / util-linux)"
    probe = f"slprobe{os.getpid() % 100000}"
    r = _ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"cannot create a network namespace here: {r.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def networks_in_use() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network a route (any table) or an address of this machine's root namespace covers."""
    used = []
    for args in (("-4", "-j", "route", "show", "table", "all"), ("-4", "-j", "addr")):
        for item in json.loads(_ip(*args).stdout or "[]"):
            if item.get("dst") not in (None, "default"):
                used.append(ipaddress.ip_network(item["dst"], strict=False))
            for a in item.get("addr_info", []):
                used.append(ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False))
    return used


def pick_subnet(in_use: list[ipaddress.IPv4Network] | None = None) -> ipaddress.IPv4Network:
    """The first /24 of SEARCH_SPACE that overlaps no network in use here."""
    in_use = networks_in_use() if in_use is None else in_use
    for net in SEARCH_SPACE.subnets(new_prefix=24):
        if not any(net.overlaps(u) for u in in_use):
            return net
    raise NetnsError(f"no free /24 in {SEARCH_SPACE}: every one overlaps a route or address here")


@dataclass
class Network:
    """The hosts of one cluster: names in order, their addresses in `subnet` (.1, .2, ...), one bridge."""

    tag: str
    subnet: str
    names: list[str]
    hosts_dir: str  # one hosts file per host

    @property
    def bridge(self) -> str:
        return f"b{self.tag}"

    def netns(self, name: str) -> str:
        return f"{self.tag}-{name}"

    def veth(self, name: str) -> str:  # the root end of the host's link (15 characters at most)
        return f"v{self.tag}{self.names.index(name) + 1}"

    def address(self, name: str) -> str:
        return str(ipaddress.ip_network(self.subnet)[self.names.index(name) + 1])

    def hosts_file(self, name: str) -> Path:
        return Path(self.hosts_dir) / name

    def enter(self, name: str, argv: list[str]) -> list[str]:
        """`argv` run as host `name`: in its network namespace, with its own hostname and its own /etc/hosts (a
        private mount namespace, so nothing of the machine's changes). Not `ip netns exec`, which remounts /sys and
        so hides the cgroup tree that slurmd reads."""
        script = 'hostname "$0" && mount --bind "$1" /etc/hosts && shift && exec "$@"'
        return ["nsenter", f"--net=/run/netns/{self.netns(name)}", "unshare", "--uts", "--mount",
                "--propagation", "private", "sh", "-c", script, name, str(self.hosts_file(name)), *argv]

    def limit(self, rate: str | None) -> None:
        """Shape every host's link to `rate` (tc's units, e.g. 100mbit) in both directions, or lift it (None)."""
        for name in self.names:
            for dev, ns in ((self.veth(name), None), ("eth0", self.netns(name))):
                pre = ["-n", ns] if ns else []
                subprocess.run(["tc", *pre, "qdisc", "del", "dev", dev, "root"], capture_output=True, timeout=30)
                if rate:
                    r = subprocess.run(["tc", *pre, "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate,
                                        "burst", "256kb", "latency", "50ms"], capture_output=True, text=True,
                                       timeout=30)
                    if r.returncode != 0:
                        raise NetnsError(f"tc cannot limit {dev} to {rate}: {r.stderr.strip()}")

    def set_link(self, name: str, up: bool) -> None:
        """Take a host's link down (a node lost to the network) or up again."""
        _ip("link", "set", self.veth(name), "up" if up else "down")

    def destroy(self, timeout: float = 10.0) -> None:
        """Remove the namespaces, their links and the bridge; wait until the kernel has let them go."""
        for name in self.names:
            _ip("netns", "del", self.netns(name), check=False)
        _ip("link", "del", self.bridge, check=False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.leftovers():
            time.sleep(0.1)
        for dev in self.leftovers():  # a namespace is freed lazily; its veth goes with it, or here
            _ip("link", "del", dev, check=False)

    def leftovers(self) -> list[str]:
        """Links and namespaces of this network that still exist (empty once destroyed)."""
        links = [x.split("@")[0] for x in _ip("-br", "link", check=False).stdout.split() if x.startswith(
            (f"v{self.tag}", f"b{self.tag}"))]
        spaces = [x for x in _ip("netns", "list", check=False).stdout.split() if x.startswith(f"{self.tag}-")]
        return links + spaces


def create(tag: str, names: list[str], workdir: Path) -> Network:
    """Namespaces for `names` on a new bridge, addresses from a free /24, one hosts file each."""
    if len(f"v{tag}{len(names)}") > 15:
        raise NetnsError(f"tag {tag!r} too long for a link name (15 characters)")
    hosts_dir = Path(workdir) / "hosts"
    hosts_dir.mkdir(parents=True, exist_ok=True)
    # one cluster at a time picks its /24 and claims it (the bridge's address is the claim)
    with open("/run/slurm-netns.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        net = Network(tag, str(pick_subnet()), list(names), str(hosts_dir))
        _build(net)
    table = "".join(f"{net.address(n)}\t{n}\n" for n in names)
    for name in names:  # each host resolves its own name to its own address, never to 127.0.1.1
        net.hosts_file(name).write_text(f"127.0.0.1\tlocalhost\n{table}")
    return net


def _build(net: Network) -> None:
    prefix = ipaddress.ip_network(net.subnet).prefixlen
    try:
        _ip("link", "add", net.bridge, "type", "bridge")
        _ip("addr", "add", f"{ipaddress.ip_network(net.subnet)[BRIDGE_HOST]}/{prefix}", "dev", net.bridge)
        _ip("link", "set", net.bridge, "up")
        for name in net.names:
            ns = net.netns(name)
            _ip("netns", "add", ns)
            _ip("link", "add", net.veth(name), "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", net.veth(name), "master", net.bridge, "up")
            _ip("-n", ns, "addr", "add", f"{net.address(name)}/{prefix}", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
    except BaseException:
        net.destroy()
        raise
