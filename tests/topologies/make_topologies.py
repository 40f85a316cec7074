#!/usr/bin/env python3
"""Writes the hwloc 2.x XML topologies of tests/topologies/ (machines we do not have).

    python3 tests/topologies/make_topologies.py [OUTPUT_DIR]

Each machine is a small description (CPU part, packages, NUMA domains, PCI trees, NVLink)
turned into the XML that `lstopo --of xml` writes with hwloc 2.9: the same elements,
attribute order, bitmap and link-speed formatting. Output is deterministic: running this
again reproduces the shipped files byte for byte. Conventions Loom's loader relies on
(HostName, LoomSmpGBps, LoomPortGbps, cudaN/nvmlN, NVLinkBandwidth): README.md here and
docs/TOPOLOGY.md. Python 3 standard library only.
"""

import os
import struct
import sys
import uuid

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

# hwloc distance kinds (include/hwloc/distances.h).
KIND_FROM_OS = 1 << 0
KIND_MEANS_LATENCY = 1 << 2
KIND_MEANS_BANDWIDTH = 1 << 3
KIND_HETEROGENEOUS_TYPES = 1 << 4

# hwloc_obj_osdev_type_e
OSDEV_BLOCK, OSDEV_GPU, OSDEV_NETWORK, OSDEV_OPENFABRICS, OSDEV_DMA, OSDEV_COPROC = range(6)

GROUP_KIND_MEMORY = 1001  # the Group hwloc creates to hold a NUMA node smaller than a package


# --------------------------------------------------------------------------------------------
# Formatting helpers: exactly as hwloc 2.9 prints them.

def pcie_gbps(gen, width):
    """hwloc's pci_link_speed: GB/s after line encoding, stored as a C float, printed "%f"."""
    gt = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0}[gen]
    encoding = 0.8 if gen <= 2 else 128.0 / 130.0
    value = struct.unpack("f", struct.pack("f", gt * encoding * width / 8))[0]
    return "%f" % value


def bitmap(bits):
    """hwloc_bitmap_snprintf: 32-bit words, highest first, inner zero words left empty."""
    bits = sorted(set(bits))
    if not bits:
        return "0x0"
    value = 0
    for bit in bits:
        value |= 1 << bit
    top = bits[-1] // 32
    out = []
    for word in range(top, -1, -1):
        chunk = (value >> (32 * word)) & 0xFFFFFFFF
        prefix = "," if out else ""
        if chunk:
            out.append("%s0x%08x" % (prefix, chunk))
        elif word == 0:
            out.append(prefix + "0x0")
        else:
            out.append(prefix)
    return "".join(out)


def escape(text):
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


def busid(domain, bus, dev=0, func=0):
    return "%04x:%02x:%02x.%01x" % (domain, bus, dev, func)


def mac(seed, index, oui="b8:3f:d2"):
    """A stable made-up MAC address."""
    digest = uuid.uuid5(uuid.NAMESPACE_DNS, "%s/%d" % (seed, index)).bytes
    return oui + ":" + ":".join("%02x" % b for b in digest[:3])


# --------------------------------------------------------------------------------------------
# The object tree.

class Obj:
    """One hwloc object. attrs keep hwloc's export order; children are split as hwloc keeps
    them (memory children first, then normal, then I/O)."""

    def __init__(self, type_, os_index=None, name=None, subtype=None, attrs=None, infos=None):
        self.type = type_
        self.os_index = os_index
        self.name = name
        self.subtype = subtype
        self.attrs = list(attrs or [])     # (name, value) after gp_index/name/subtype
        self.infos = list(infos or [])     # (name, value)
        self.page_types = []               # (size, count), NUMA nodes only
        self.memory = []
        self.normal = []
        self.io = []
        self.cpus = None                   # set of PU indexes (normal and memory objects)
        self.nodes = None                  # set of NUMA node indexes
        self.gp_index = None
        # PCI bookkeeping (bus numbers drive bridge ranges)
        self.domain = 0
        self.bus = None
        self.bus_key = None

    def children(self):
        return self.memory + self.normal + self.io


def pci_attrs(domain, bus, dev, func, klass, vendor, device, subvendor, subdevice, rev, speed):
    return [("pci_busid", busid(domain, bus, dev, func)),
            ("pci_type", "%04x [%04x:%04x] [%04x:%04x] %02x" % (klass, vendor, device, subvendor,
                                                              subdevice, rev)),
            ("pci_link_speed", speed)]


def pci_names(vendor_name, device_name):
    return [("PCIVendor", vendor_name), ("PCIDevice", device_name)]


def max_bus(obj):
    buses = [obj.bus] if obj.bus is not None else []
    for child in obj.io:
        sub = max_bus(child)
        if sub is not None:
            buses.append(sub)
    return max(buses) if buses else None


# --------------------------------------------------------------------------------------------
# PCI building blocks.

def host_bridge(children):
    """The host bridge hwloc puts above the PCI objects of one root bus: its secondary bus
    is theirs, its subordinate the highest bus below."""
    buses = sorted({c.bus for c in children})
    assert len(buses) == 1, "a host bridge's children share its root bus: %s" % buses
    bridge = Obj("Bridge")
    bridge.domain = children[0].domain
    bridge.io = sorted(children, key=lambda c: c.bus_key)
    sub = max(max_bus(c) for c in children)
    bridge.attrs = [("bridge_type", "0-1"), ("depth", "0"),
                    ("bridge_pci", "%04x:[%02x-%02x]" % (bridge.domain, buses[0], sub))]
    return bridge


def set_bridge_depths(obj, depth):
    if obj.type == "Bridge":
        obj.attrs = [(k, str(depth) if k == "depth" else v) for k, v in obj.attrs]
        depth += 1
    for child in obj.io:
        set_bridge_depths(child, depth)


def pci_bridge(bus, dev, part, speed, children):
    """A PCI-to-PCI bridge (switch port) at bus:dev.0 whose secondary bus is its children's."""
    buses = sorted({c.bus for c in children})
    assert len(buses) == 1, buses
    bridge = Obj("Bridge")
    bridge.bus, bridge.bus_key = bus, (bus, dev, 0)
    bridge.io = sorted(children, key=lambda c: c.bus_key)
    sub = max(max_bus(c) for c in children)
    assert buses[0] > bus
    bridge.attrs = ([("bridge_type", "1-1"), ("depth", "?"),
                     ("bridge_pci", "%04x:[%02x-%02x]" % (0, buses[0], sub))]
                    + pci_attrs(0, bus, dev, 0, 0x0604, part["vendor"], part["device"],
                                part["subvendor"], part["subdevice"], part["rev"], speed))
    bridge.infos = pci_names(part["vendor_name"], part["device_name"])
    return bridge


def pcie_switch(bus, dev, part, speed, devices):
    """A PCIe switch as lstopo shows it: the upstream port at bus:dev.0, one downstream-port
    bridge (same part) per device, the ports on the bus just below the lowest device bus,
    each device on its own bus. `devices` are (PCIDev, link speed of its downstream port)."""
    secondary = min(d.bus for d, _ in devices) - 1
    assert secondary > bus
    ports = [pci_bridge(secondary, k, part, down_speed, [device])
             for k, (device, down_speed) in enumerate(devices)]
    return pci_bridge(bus, dev, part, speed, ports)


def pci_device(bus, spec, speed, dev_no=0, func=0, subtype=None, infos=()):
    dev = Obj("PCIDev", subtype=subtype)
    dev.bus, dev.bus_key = bus, (bus, dev_no, func)
    dev.attrs = pci_attrs(0, bus, dev_no, func, spec["class"], spec["vendor"], spec["device"],
                          spec["subvendor"], spec["subdevice"], spec["rev"], speed)
    dev.infos = pci_names(spec["vendor_name"], spec["device_name"]) + list(infos)
    return dev


def osdev(name, kind, infos, subtype=None):
    return Obj("OSDev", name=name, subtype=subtype, attrs=[("osdev_type", str(kind))], infos=infos)


def gpu(bus, spec, ordinal, speed, host):
    """A GPU with the cudaN (CoProc) and nvmlN (GPU) OS devices of hwloc's CUDA and NVML
    plugins; N is the CUDA ordinal."""
    dev = pci_device(bus, spec, speed)
    cuda = spec["cuda"]
    uid = uuid.uuid5(uuid.NAMESPACE_DNS, "%s/gpu%d" % (host, ordinal))
    dev.io = [
        osdev("cuda%d" % ordinal, OSDEV_COPROC, subtype="CUDA", infos=[
            ("CoProcType", "CUDA"),
            ("Backend", "CUDA"),
            ("GPUVendor", "NVIDIA Corporation"),
            ("GPUModel", spec["model"]),
            ("CUDAGlobalMemorySize", str(cuda["memory_mib"] * 1024)),   # KiB
            ("CUDAL2CacheSize", str(cuda["l2_kib"])),
            ("CUDAMultiProcessors", str(cuda["sms"])),
            ("CUDACoresPerMP", str(cuda["cores_per_sm"])),
            ("CUDASharedMemorySizePerMP", "48"),
        ]),
        osdev("nvml%d" % ordinal, OSDEV_GPU, subtype="NVML", infos=[
            ("Backend", "NVML"),
            ("GPUVendor", "NVIDIA Corporation"),
            ("GPUModel", spec["model"]),
            ("NVIDIAUUID", "GPU-%s" % uid),
        ]),
    ]
    dev.gpu_ordinal = ordinal
    return dev


def nic(bus, spec, speed, port_gbps, host, rdma=None, netdev=None, infiniband=False):
    """A NIC: OpenFabrics OS device `rdma` (mlx5_K) and/or network OS device `netdev`, port
    speed in Loom's LoomPortGbps."""
    dev = pci_device(bus, spec, speed, infos=[("LoomPortGbps", str(port_gbps))])
    guid_bytes = uuid.uuid5(uuid.NAMESPACE_DNS, "%s/%s/%s" % (host, rdma, netdev)).bytes
    guid = "b83f:d203:00%02x:%02x%02x" % tuple(guid_bytes[:3])
    lid = "0x%x" % (1 + guid_bytes[3] % 200) if infiniband else "0x0"
    address = mac(host, bus)
    if rdma:
        dev.io.append(osdev(rdma, OSDEV_OPENFABRICS, infos=[
            ("Backend", "OpenFabrics"),
            ("NodeGUID", guid),
            ("SysImageGUID", guid),
            ("Port1State", "4"),
            ("Port1LID", lid),
            ("Port1LMC", "0"),
            ("Port1GID0", "fe80:0000:0000:0000:" + guid),
        ]))
    if netdev:
        if infiniband:
            # IPoIB: 4 bytes of QPN and flags, then the 16-byte port GID.
            gid = "fe:80:00:00:00:00:00:00:" + ":".join(
                guid.replace(":", "")[i:i + 2] for i in range(0, 16, 2))
            infos = [("Address", "00:00:10:49:" + gid), ("Port", "1")]
        else:
            infos = [("Address", address)]
            if rdma:
                infos.append(("Port", "1"))
        dev.io.append(osdev(netdev, OSDEV_NETWORK, infos=infos))
    return dev


def nvme(bus, spec, speed, name, size_bytes):
    dev = pci_device(bus, spec, speed)
    dev.io.append(osdev(name, OSDEV_BLOCK, subtype="Disk", infos=[
        ("Size", str(size_bytes // 1024)),
        ("SectorSize", "512"),
        ("LinuxDeviceID", "259:0"),
        ("Model", spec["model"]),
        ("SerialNumber", "S6B0NL0W000000"),
    ]))
    return dev


# --------------------------------------------------------------------------------------------
# CPU side.

def cache(level, size, linesize, assoc, kind, os_index, cpus, nodes):
    name = {1: "L1Cache", 2: "L2Cache", 3: "L3Cache"}[level]
    obj = Obj(name, os_index=os_index, attrs=[
        ("cache_size", str(size)), ("depth", str(level)), ("cache_linesize", str(linesize)),
        ("cache_associativity", str(assoc)), ("cache_type", str(kind))])
    obj.cpus, obj.nodes = set(cpus), set(nodes)
    return obj


def build_cpus(machine, cpu, packages, numa_per_package, memory_per_numa):
    """Packages > [Group per NUMA domain when a package has several] > L3 > L2 > L1 > Core >
    PU, the NUMA node a memory child of the Package (or of its Group). SMT off: one PU per
    core, PUs numbered package by package."""
    cores = cpu["cores"]
    cores_per_numa = cores // numa_per_package
    cores_per_l3 = cpu["cores_per_l3"]
    assert cores % numa_per_package == 0 and cores_per_numa % cores_per_l3 == 0
    counters = {"l3": 0, "core": 0}
    for p in range(packages):
        pkg = Obj("Package", os_index=p, infos=[
            ("CPUVendor", cpu["vendor"]),
            ("CPUFamilyNumber", str(cpu["family"])),
            ("CPUModelNumber", str(cpu["model_number"])),
            ("CPUModel", cpu["model"]),
            ("CPUStepping", str(cpu["stepping"])),
        ])
        pkg.cpus = set(range(p * cores, (p + 1) * cores))
        pkg.nodes = set(range(p * numa_per_package, (p + 1) * numa_per_package))
        for n in range(numa_per_package):
            numa_index = p * numa_per_package + n
            first = p * cores + n * cores_per_numa
            numa_cpus = set(range(first, first + cores_per_numa))
            numa = Obj("NUMANode", os_index=numa_index,
                       attrs=[("local_memory", str(memory_per_numa))])
            numa.cpus, numa.nodes = numa_cpus, {numa_index}
            numa.page_types = [(4096, memory_per_numa // 4096), (2 * MIB, 0), (GIB, 0)]
            if numa_per_package > 1:
                holder = Obj("Group", attrs=[("kind", str(GROUP_KIND_MEMORY)), ("subkind", "0")])
                holder.cpus, holder.nodes = set(numa_cpus), {numa_index}
                pkg.normal.append(holder)
            else:
                holder = pkg
            holder.memory.append(numa)
            for l3_first in range(first, first + cores_per_numa, cores_per_l3):
                l3 = cache(3, cpu["l3"], 64, cpu["l3_assoc"], 0, counters["l3"],
                           range(l3_first, l3_first + cores_per_l3), {numa_index})
                counters["l3"] += 1
                holder.normal.append(l3)
                for c in range(l3_first, l3_first + cores_per_l3):
                    l2 = cache(2, cpu["l2"], 64, cpu["l2_assoc"], 0, c, {c}, {numa_index})
                    l1 = cache(1, cpu["l1d"], 64, cpu["l1d_assoc"], 1, c, {c}, {numa_index})
                    core = Obj("Core", os_index=c - p * cores)
                    core.cpus, core.nodes = {c}, {numa_index}
                    pu = Obj("PU", os_index=c)
                    pu.cpus, pu.nodes = {c}, {numa_index}
                    core.normal.append(pu)
                    l1.normal.append(core)
                    l2.normal.append(l1)
                    l3.normal.append(l2)
        machine.normal.append(pkg)
    machine.cpus = set(range(packages * cores))
    machine.nodes = set(range(packages * numa_per_package))


def numa_holder(machine, numa_index):
    """The non-I/O object a NUMA domain's I/O hangs below: its Group, else its Package."""
    for pkg in machine.normal:
        if numa_index in pkg.nodes:
            for group in pkg.normal:
                if group.type == "Group" and group.nodes == {numa_index}:
                    return group
            return pkg
    raise ValueError(numa_index)


# --------------------------------------------------------------------------------------------
# Serialisation.

def assign_gp_indexes(root):
    counter = [0]

    def walk(obj):
        counter[0] += 1
        obj.gp_index = counter[0]
        for child in obj.children():
            walk(child)
    walk(root)


def check_tree(obj, parent=None):
    """cpusets and nodesets of children within their parent's; gp_index unique."""
    if parent is not None and obj.cpus is not None:
        assert obj.cpus <= parent.cpus and obj.nodes <= parent.nodes, (obj.type, parent.type)
    for child in obj.normal:
        check_tree(child, obj)
    for child in obj.memory:
        check_tree(child, obj)
    for child in obj.io:
        check_tree(child, obj)


def emit_object(obj, out, indent, root=False):
    pad = "  " * indent
    attrs = [("type", obj.type)]
    if obj.os_index is not None:
        attrs.append(("os_index", str(obj.os_index)))
    if obj.cpus is not None:
        cpuset, nodeset = bitmap(obj.cpus), bitmap(obj.nodes)
        attrs += [("cpuset", cpuset), ("complete_cpuset", cpuset)]
        if root:
            attrs.append(("allowed_cpuset", cpuset))
        attrs += [("nodeset", nodeset), ("complete_nodeset", nodeset)]
        if root:
            attrs.append(("allowed_nodeset", nodeset))
    attrs.append(("gp_index", str(obj.gp_index)))
    if obj.name is not None:
        attrs.append(("name", obj.name))
    if obj.subtype is not None:
        attrs.append(("subtype", obj.subtype))
    attrs += obj.attrs
    head = pad + "<object " + " ".join('%s="%s"' % (k, escape(v)) for k, v in attrs)
    body = []
    for size, count in obj.page_types:
        body.append('%s  <page_type size="%d" count="%d"/>' % (pad, size, count))
    for name, value in obj.infos:
        body.append('%s  <info name="%s" value="%s"/>' % (pad, escape(name), escape(value)))
    children = obj.children()
    if not body and not children:
        out.append(head + "/>")
        return
    out.append(head + ">")
    out.extend(body)
    for child in children:
        emit_object(child, out, indent + 1)
    out.append(pad + "</object>")


def emit_array(out, tag, items, per_line=10):
    """hwloc's EXPORT_ARRAY: up to 10 values per element, each followed by a space."""
    for i in range(0, len(items), per_line):
        text = "".join("%s " % item for item in items[i:i + per_line])
        out.append('    <%s length="%d">%s</%s>' % (tag, len(text), text, tag))


def emit_distances(out, name, kind, objs, values, os_indexing_type=None):
    n = len(objs)
    assert len(values) == n and all(len(row) == n for row in values)
    flat = [v for row in values for v in row]
    if os_indexing_type:
        out.append('  <distances2 type="%s" nbobjs="%d" kind="%d" name="%s" indexing="os">'
                   % (os_indexing_type, n, kind, name))
        emit_array(out, "indexes", [o.os_index for o in objs])
    else:
        out.append('  <distances2hetero nbobjs="%d" kind="%d" name="%s">' % (n, kind, name))
        emit_array(out, "indexes", ["%s:%d" % (o.type, o.gp_index) for o in objs])
    emit_array(out, "u64values", flat)
    out.append("  </distances2>" if os_indexing_type else "  </distances2hetero>")


def render(machine, distances):
    assign_gp_indexes(machine)
    check_tree(machine)
    for bridge in machine_bridges(machine):
        set_bridge_depths(bridge, 0)
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
           '<topology version="2.0">']
    emit_object(machine, out, 1, root=True)
    # hwloc exports homogeneous matrices first, then heterogeneous ones.
    for d in sorted(distances, key=lambda d: d[4] is None):
        emit_distances(out, *d)
    out.append("</topology>")
    return "\n".join(out) + "\n"


def machine_bridges(obj):
    """Top-level I/O objects (host bridges) anywhere below the normal objects."""
    found = [c for c in obj.io]
    for child in obj.normal:
        found += machine_bridges(child)
    return found


def numa_latency(machine, same_socket, across):
    nodes = []
    for pkg in machine.normal:
        stack = [pkg]
        while stack:
            o = stack.pop(0)
            nodes += [m for m in o.memory]
            stack += o.normal
    nodes.sort(key=lambda n: n.os_index)
    socket_of = {}
    for pkg in machine.normal:
        for n in pkg.nodes:
            socket_of[n] = pkg.os_index
    values = [[10 if a is b else same_socket if socket_of[a.os_index] == socket_of[b.os_index]
               else across for b in nodes] for a in nodes]
    return ("NUMALatency", KIND_FROM_OS | KIND_MEANS_LATENCY, nodes, values, "NUMANode")


def new_machine(host, smp_gbps):
    infos = [("Backend", "Linux"), ("OSName", "Linux"), ("OSRelease", "5.15.0-105-generic"),
             ("OSVersion", "#115-Ubuntu SMP"), ("HostName", host), ("Architecture", "x86_64"),
             ("hwlocVersion", "2.9.0")]
    if smp_gbps:
        infos.append(("LoomSmpGBps", str(smp_gbps)))
    return Obj("Machine", os_index=0, infos=infos)


def check_gpu_order(machine):
    """CUDA ordinals in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID)."""
    gpus = []

    def walk(o):
        if hasattr(o, "gpu_ordinal"):
            gpus.append((o.bus_key, o.gpu_ordinal))
        for c in o.children():
            walk(c)
    walk(machine)
    assert [g for _, g in sorted(gpus)] == list(range(len(gpus))), gpus


# --------------------------------------------------------------------------------------------
# Parts.

XEON_8480C = dict(vendor="GenuineIntel", family=6, model_number=143, stepping=8,
                  model="Intel(R) Xeon(R) Platinum 8480C", cores=56, cores_per_l3=56,
                  l3=105 * MIB, l3_assoc=15, l2=2 * MIB, l2_assoc=16, l1d=48 * KIB, l1d_assoc=12)
XEON_6338 = dict(vendor="GenuineIntel", family=6, model_number=106, stepping=6,
                 model="Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", cores=32, cores_per_l3=32,
                 l3=48 * MIB, l3_assoc=12, l2=1280 * KIB, l2_assoc=20, l1d=48 * KIB, l1d_assoc=12)
EPYC_7543 = dict(vendor="AuthenticAMD", family=25, model_number=1, stepping=1,
                 model="AMD EPYC 7543 32-Core Processor", cores=32, cores_per_l3=8,
                 l3=32 * MIB, l3_assoc=16, l2=512 * KIB, l2_assoc=8, l1d=32 * KIB, l1d_assoc=8)
CORE_I7_13700H = dict(vendor="GenuineIntel", family=6, model_number=186, stepping=2,
                      model="13th Gen Intel(R) Core(TM) i7-13700H", cores=8, cores_per_l3=8,
                      l3=24 * MIB, l3_assoc=12, l2=1280 * KIB, l2_assoc=10, l1d=48 * KIB,
                      l1d_assoc=12)

PEX_GEN5 = dict(vendor=0x1000, device=0xc030, subvendor=0x1000, subdevice=0x100b, rev=0xb0,
                vendor_name="Broadcom / LSI", device_name="PEX890xx PCIe Gen 5 Switch")
PEX_GEN4 = dict(vendor=0x1000, device=0xc010, subvendor=0x1000, subdevice=0xa064, rev=0xb0,
                vendor_name="Broadcom / LSI", device_name="PEX880xx PCIe Gen 4 Switch")

H100_SXM = dict(**{"class": 0x0302}, vendor=0x10de, device=0x2330, subvendor=0x10de,
                subdevice=0x16c1, rev=0xa1, vendor_name="NVIDIA Corporation",
                device_name="GH100 [H100 SXM5 80GB]", model="NVIDIA H100 80GB HBM3",
                cuda=dict(memory_mib=81559, l2_kib=51200, sms=132, cores_per_sm=128))
A100_PCIE = dict(**{"class": 0x0302}, vendor=0x10de, device=0x20b5, subvendor=0x10de,
                 subdevice=0x1533, rev=0xa1, vendor_name="NVIDIA Corporation",
                 device_name="GA100 [A100 PCIe 80GB]", model="NVIDIA A100 80GB PCIe",
                 cuda=dict(memory_mib=81920, l2_kib=40960, sms=108, cores_per_sm=64))
RTX4070_LAPTOP = dict(**{"class": 0x0300}, vendor=0x10de, device=0x2860, subvendor=0x1043,
                      subdevice=0x1a83, rev=0xa1, vendor_name="NVIDIA Corporation",
                      device_name="AD106M [GeForce RTX 4070 Max-Q / Mobile]",
                      model="NVIDIA GeForce RTX 4070 Laptop GPU",
                      cuda=dict(memory_mib=8192, l2_kib=32768, sms=36, cores_per_sm=128))
NVSWITCH_H100 = dict(**{"class": 0x0680}, vendor=0x10de, device=0x22a3, subvendor=0x10de,
                     subdevice=0x1796, rev=0xa1, vendor_name="NVIDIA Corporation",
                     device_name="GH100 [H100 NVSwitch]")
CX7_IB = dict(**{"class": 0x0207}, vendor=0x15b3, device=0x1021, subvendor=0x15b3,
              subdevice=0x0041, rev=0x00, vendor_name="Mellanox Technologies",
              device_name="MT2910 Family [ConnectX-7]")
CX6DX = dict(**{"class": 0x0200}, vendor=0x15b3, device=0x101d, subvendor=0x15b3,
             subdevice=0x0042, rev=0x00, vendor_name="Mellanox Technologies",
             device_name="MT2892 Family [ConnectX-6 Dx]")
X710 = dict(**{"class": 0x0200}, vendor=0x8086, device=0x1572, subvendor=0x8086,
            subdevice=0x0006, rev=0x02, vendor_name="Intel Corporation",
            device_name="Ethernet Controller X710 for 10GbE SFP+")
E810 = dict(**{"class": 0x0200}, vendor=0x8086, device=0x1593, subvendor=0x8086,
            subdevice=0x0002, rev=0x02, vendor_name="Intel Corporation",
            device_name="Ethernet Controller E810-C for SFP")
WIFI_AX211 = dict(**{"class": 0x0280}, vendor=0x8086, device=0x51f0, subvendor=0x8086,
                  subdevice=0x0094, rev=0x01, vendor_name="Intel Corporation",
                  device_name="Alder Lake-P PCH CNVi WiFi")
NVME_980 = dict(**{"class": 0x0108}, vendor=0x144d, device=0xa80a, subvendor=0x144d,
                subdevice=0xa801, rev=0x00, vendor_name="Samsung Electronics Co Ltd",
                device_name="NVMe SSD Controller PM9A1/PM9A3/980PRO",
                model="SAMSUNG MZVL21T0HCLR-00B00")

GEN5_X16 = pcie_gbps(5, 16)
GEN4_X16 = pcie_gbps(4, 16)
GEN4_X8 = pcie_gbps(4, 8)
GEN4_X4 = pcie_gbps(4, 4)
GEN3_X8 = pcie_gbps(3, 8)
INTEGRATED = "0.000000"  # on-die devices report no link


# --------------------------------------------------------------------------------------------
# The machines.

def dgx_h100():
    """DGX-H100-like: 2 x Xeon 8480C, 8 H100 SXM, one ConnectX-7 400G IB per GPU under a
    shared gen5 switch, 2 switches per host bridge, 4 NVSwitches, NVLink 4 (18 links/GPU)."""
    host = "dgx-h100"
    machine = new_machine(host, 64)
    build_cpus(machine, XEON_8480C, packages=2, numa_per_package=1, memory_per_numa=1024 * GIB)
    # (host bridge root bus, [(switch upstream device number, GPU bus)]) per socket; the NIC
    # of each pair is on the bus after its GPU.
    layout = {0: [(0x16, [(0, 0x18), (1, 0x2a)]), (0x38, [(0, 0x3a), (1, 0x5d)])],
              1: [(0x98, [(0, 0x9a), (1, 0xab)]), (0xb8, [(0, 0xba), (1, 0xdb)])]}
    ordinal = 0
    for socket, bridges in sorted(layout.items()):
        pkg = numa_holder(machine, socket)
        ios = []
        for root_bus, pairs in bridges:
            switches = []
            for dev, gpu_bus in pairs:
                k = ordinal
                g = gpu(gpu_bus, H100_SXM, k, GEN5_X16, host)
                n = nic(gpu_bus + 1, CX7_IB, GEN5_X16, 400, host, rdma="mlx5_%d" % k,
                        netdev="ibp%ds0" % (gpu_bus + 1), infiniband=True)
                switches.append(pcie_switch(root_bus, dev, PEX_GEN5, GEN5_X16,
                                            [(g, GEN5_X16), (n, GEN5_X16)]))
                ordinal += 1
            ios.append(host_bridge(switches))
        # Two NVSwitches behind their own small switch on each socket.
        nv_root = 0x05 if socket == 0 else 0x85
        nvswitches = [pci_device(nv_root + 2 + i, NVSWITCH_H100, GEN4_X4, subtype="NVSwitch")
                      for i in range(2)]
        ios.append(host_bridge([pcie_switch(nv_root, 0, PEX_GEN4, GEN4_X4,
                                            [(s, GEN4_X4) for s in nvswitches])]))
        if socket == 0:
            ios.append(host_bridge([nic(0x03, X710, GEN3_X8, 10, host, netdev="eno1")]))
        pkg.io = sorted(ios, key=lambda b: min(c.bus for c in b.io))
    check_gpu_order(machine)

    # NVLinkBandwidth over the nvml OS devices then the NVSwitch PCI devices (the order of
    # hwloc's NVML backend): 18 NVLink 4 links per GPU at 25 GB/s each way, 5/4/4/5 to
    # NVSwitches 0..3, summed in MB/s. GPU<->GPU, switch<->switch and the diagonal stay 0.
    nvml, switches = [], []

    def collect(o):
        if o.type == "OSDev" and o.name.startswith("nvml"):
            nvml.append(o)
        if o.subtype == "NVSwitch":
            switches.append(o)
        for c in o.children():
            collect(c)
    collect(machine)
    nvml.sort(key=lambda o: int(o.name[4:]))
    links = [5, 4, 4, 5]
    objs = nvml + switches
    values = [[0] * len(objs) for _ in objs]
    for g in range(len(nvml)):
        for s, count in enumerate(links):
            values[g][len(nvml) + s] = values[len(nvml) + s][g] = count * 25000
    nvlink = ("NVLinkBandwidth", KIND_FROM_OS | KIND_MEANS_BANDWIDTH | KIND_HETEROGENEOUS_TYPES,
              objs, values, None)
    return machine, [numa_latency(machine, 10, 21), nvlink]


def pcie_2socket_4gpu():
    """2 x Xeon Gold 6338; per socket one gen4 switch with 2 A100 PCIe and a ConnectX-6 Dx
    100 GbE. No NVLink."""
    host = "pcie-4gpu"
    machine = new_machine(host, 64)
    build_cpus(machine, XEON_6338, packages=2, numa_per_package=1, memory_per_numa=256 * GIB)
    for socket, root_bus in ((0, 0x16), (1, 0x96)):
        devices = [(gpu(root_bus + 2 + i, A100_PCIE, 2 * socket + i, GEN4_X16, host), GEN4_X16)
                   for i in range(2)]
        devices.append((nic(root_bus + 4, CX6DX, GEN4_X16, 100, host, rdma="mlx5_%d" % socket,
                            netdev="ens%df0" % (socket + 1)), GEN4_X16))
        numa_holder(machine, socket).io = [
            host_bridge([pcie_switch(root_bus, 0, PEX_GEN4, GEN4_X16, devices)])]
    check_gpu_order(machine)
    return machine, [numa_latency(machine, 10, 21)]


def cpu_2socket():
    """2 x EPYC 7543 in NPS2 (2 NUMA domains per package, 2 CCX L3s per domain), one E810
    25 GbE on NUMA domain 0. No GPUs."""
    host = "cpu-2s"
    machine = new_machine(host, 72)
    build_cpus(machine, EPYC_7543, packages=2, numa_per_package=2, memory_per_numa=128 * GIB)
    numa_holder(machine, 0).io = [host_bridge([nic(0x41, E810, GEN4_X8, 25, host,
                                                   netdev="ens1f0")])]
    return machine, [numa_latency(machine, 12, 32)]


def laptop():
    """One 8-core Core i7 (hybrid cores left out), RTX 4070 Laptop GPU, Wi-Fi, one NVMe."""
    host = "laptop"
    machine = new_machine(host, None)
    build_cpus(machine, CORE_I7_13700H, packages=1, numa_per_package=1, memory_per_numa=32 * GIB)
    # CNVi Wi-Fi is part of the chipset: on the root bus, no PCIe link of its own.
    wifi = pci_device(0x00, WIFI_AX211, INTEGRATED, dev_no=0x14, func=3,
                      infos=[("LoomPortGbps", "1")])
    wifi.io = [osdev("wlp0s20f3", OSDEV_NETWORK,
                     infos=[("Address", mac(host, 0x14, "a4:6b:b6"))])]
    machine.io = [
        host_bridge([wifi]),
        host_bridge([gpu(0x01, RTX4070_LAPTOP, 0, GEN4_X8, host)]),
        host_bridge([nvme(0x02, NVME_980, GEN4_X4, "nvme0n1", 1000 * 1000 * 1000 * 1000)]),
    ]
    check_gpu_order(machine)
    return machine, []


MACHINES = {
    "dgx_h100.xml": dgx_h100,
    "pcie_2socket_4gpu.xml": pcie_2socket_4gpu,
    "cpu_2socket.xml": cpu_2socket,
    "laptop.xml": laptop,
}


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for filename, build in MACHINES.items():
        machine, distances = build()
        text = render(machine, distances)
        path = os.path.join(outdir, filename)
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        print("wrote %s (%d bytes)" % (path, len(text)))


if __name__ == "__main__":
    main()
