"""A Pod Security Standards checker: the controls of the "baseline" and "restricted" profiles as
a table, each row written from https://kubernetes.io/docs/concepts/security/pod-security-standards/
(section "Profile Details": the control's name, the fields it restricts, the allowed values).

:func:`violations` checks a pod spec (``spec`` of a Pod, or ``spec.template.spec`` of a
workload) against a profile and returns one line per violation, ``"<control>: <field>: <why>"``.
"restricted" includes every "baseline" control (the profiles are cumulative). Linux pods only:
the Windows-only ``hostProcess`` row is kept; AppArmor and SELinux rows check the fields'
values as the page lists them. No package on PyPI implements the standards in Python, so the
rows are here, each with the page's wording in its name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

URL = "https://kubernetes.io/docs/concepts/security/pod-security-standards/"

Pod = Mapping[str, Any]


def _containers(pod: Pod) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        for c in pod.get(kind) or []:
            yield f"spec.{kind}[{c.get('name')}]", c


def _sc(c: Mapping[str, Any]) -> Mapping[str, Any]:
    return c.get("securityContext") or {}


def _psc(pod: Pod) -> Mapping[str, Any]:
    return pod.get("securityContext") or {}


# --- baseline -------------------------------------------------------------------------------

def _host_process(pod: Pod) -> Iterator[str]:
    if (_psc(pod).get("windowsOptions") or {}).get("hostProcess"):
        yield "spec.securityContext.windowsOptions.hostProcess: must be undefined or false"
    for where, c in _containers(pod):
        if (_sc(c).get("windowsOptions") or {}).get("hostProcess"):
            yield f"{where}.securityContext.windowsOptions.hostProcess: must be undefined or false"


def _host_namespaces(pod: Pod) -> Iterator[str]:
    for f in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(f):
            yield f"spec.{f}: must be undefined or false"


def _privileged(pod: Pod) -> Iterator[str]:
    for where, c in _containers(pod):
        if _sc(c).get("privileged"):
            yield f"{where}.securityContext.privileged: must be undefined or false"


BASELINE_CAPS = frozenset({"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                           "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})


def _baseline_caps(pod: Pod) -> Iterator[str]:
    for where, c in _containers(pod):
        extra = set((_sc(c).get("capabilities") or {}).get("add") or []) - BASELINE_CAPS
        if extra:
            yield f"{where}.securityContext.capabilities.add: {sorted(extra)} beyond the baseline's list"


def _host_path(pod: Pod) -> Iterator[str]:
    for v in pod.get("volumes") or []:
        if "hostPath" in v:
            yield f"spec.volumes[{v.get('name')}].hostPath: must be undefined"


def _host_ports(pod: Pod) -> Iterator[str]:
    for where, c in _containers(pod):
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                yield f"{where}.ports[{p.get('name')}].hostPort: must be undefined or 0"


def _apparmor(pod: Pod) -> Iterator[str]:
    for where, sc in [("spec", _psc(pod)), *((w, _sc(c)) for w, c in _containers(pod))]:
        t = (sc.get("appArmorProfile") or {}).get("type")
        if t not in (None, "RuntimeDefault", "Localhost"):
            yield f"{where}.securityContext.appArmorProfile.type: {t!r} (allowed: RuntimeDefault, Localhost)"


SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})


def _selinux(pod: Pod) -> Iterator[str]:
    for where, sc in [("spec", _psc(pod)), *((w, _sc(c)) for w, c in _containers(pod))]:
        se = sc.get("seLinuxOptions") or {}
        if se.get("type", "") not in SELINUX_TYPES:
            yield f"{where}.securityContext.seLinuxOptions.type: {se['type']!r} not allowed"
        for f in ("user", "role"):
            if se.get(f):
                yield f"{where}.securityContext.seLinuxOptions.{f}: must be undefined"


def _proc_mount(pod: Pod) -> Iterator[str]:
    for where, c in _containers(pod):
        if _sc(c).get("procMount") not in (None, "Default"):
            yield f"{where}.securityContext.procMount: must be undefined or Default"


def _baseline_seccomp(pod: Pod) -> Iterator[str]:
    for where, sc in [("spec", _psc(pod)), *((w, _sc(c)) for w, c in _containers(pod))]:
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            yield f"{where}.securityContext.seccompProfile.type: must not be Unconfined"


SAFE_SYSCTLS = frozenset({"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                          "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                          "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                          "net.ipv4.tcp_keepalive_probes"})


def _sysctls(pod: Pod) -> Iterator[str]:
    for s in _psc(pod).get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            yield f"spec.securityContext.sysctls[{s.get('name')}]: not a safe sysctl"


# --- restricted -----------------------------------------------------------------------------

#: The page's list, plus ``image``: the Pod Security admission code allows image volumes in
#: "restricted" since Kubernetes 1.33 (kubernetes/kubernetes#130394); the page's list lags
#: (kubernetes/website#55370, "Update docs to indicate image volume types are permitted").
RESTRICTED_VOLUMES = frozenset({"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "image",
                                "persistentVolumeClaim", "projected", "secret"})


def _volume_types(pod: Pod) -> Iterator[str]:
    for v in pod.get("volumes") or []:
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            yield f"spec.volumes[{v.get('name')}]: {sorted(kinds - RESTRICTED_VOLUMES)} is not an allowed volume type"


def _privilege_escalation(pod: Pod) -> Iterator[str]:
    for where, c in _containers(pod):
        if _sc(c).get("allowPrivilegeEscalation") is not False:
            yield f"{where}.securityContext.allowPrivilegeEscalation: must be false"


def _non_root(pod: Pod) -> Iterator[str]:
    pod_level = _psc(pod).get("runAsNonRoot")
    for where, c in _containers(pod):
        own = _sc(c).get("runAsNonRoot")
        if own is False or (own is None and pod_level is not True):
            yield f"{where}: runAsNonRoot must be true (in the pod's or the container's securityContext)"


def _non_root_user(pod: Pod) -> Iterator[str]:
    if _psc(pod).get("runAsUser") == 0:
        yield "spec.securityContext.runAsUser: must not be 0"
    for where, c in _containers(pod):
        if _sc(c).get("runAsUser") == 0:
            yield f"{where}.securityContext.runAsUser: must not be 0"


def _restricted_seccomp(pod: Pod) -> Iterator[str]:
    pod_type = (_psc(pod).get("seccompProfile") or {}).get("type")
    for where, c in _containers(pod):
        t = (_sc(c).get("seccompProfile") or {}).get("type") or pod_type
        if t not in ("RuntimeDefault", "Localhost"):
            yield f"{where}: seccompProfile.type must be RuntimeDefault or Localhost (pod or container), not {t!r}"


def _restricted_caps(pod: Pod) -> Iterator[str]:
    for where, c in _containers(pod):
        caps = _sc(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            yield f"{where}.securityContext.capabilities.drop: must hold ALL"
        extra = set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
        if extra:
            yield f"{where}.securityContext.capabilities.add: only NET_BIND_SERVICE, not {sorted(extra)}"


#: (profile, control as the page names it, check).
RULES: tuple[tuple[str, str, Callable[[Pod], Iterator[str]]], ...] = (
    ("baseline", "HostProcess", _host_process),
    ("baseline", "Host Namespaces", _host_namespaces),
    ("baseline", "Privileged Containers", _privileged),
    ("baseline", "Capabilities", _baseline_caps),
    ("baseline", "HostPath Volumes", _host_path),
    ("baseline", "Host Ports", _host_ports),
    ("baseline", "AppArmor", _apparmor),
    ("baseline", "SELinux", _selinux),
    ("baseline", "/proc Mount Type", _proc_mount),
    ("baseline", "Seccomp", _baseline_seccomp),
    ("baseline", "Sysctls", _sysctls),
    ("restricted", "Volume Types", _volume_types),
    ("restricted", "Privilege Escalation", _privilege_escalation),
    ("restricted", "Running as Non-root", _non_root),
    ("restricted", "Running as Non-root user", _non_root_user),
    ("restricted", "Seccomp", _restricted_seccomp),
    ("restricted", "Capabilities", _restricted_caps),
)


def violations(pod: Pod, profile: str = "restricted") -> list[str]:
    """Every violation of ``profile`` (``baseline`` or ``restricted``, which includes baseline)
    in the pod spec ``pod``: ``"<control>: <field>: <why>"`` lines, in table order."""
    levels = {"baseline": ("baseline",), "restricted": ("baseline", "restricted")}[profile]
    return [f"{name}: {line}" for level, name, check in RULES if level in levels for line in check(pod)]


def pod_specs(docs) -> list[tuple[str, Pod]]:
    """``(name, pod spec)`` of every Deployment (its template) and Pod in ``docs``."""
    out = []
    for d in docs:
        if d and d.get("kind") == "Deployment":
            out.append((d["metadata"]["name"], d["spec"]["template"]["spec"]))
        elif d and d.get("kind") == "Pod":
            out.append((d["metadata"]["name"], d["spec"]))
    return out
