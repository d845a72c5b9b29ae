# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ``backendai`` CNI plugin's look-up of an allocation in the agent's local Nomad agent. Stdlib only.

Installed next to ``_cni_plugin.py``. At every ADD and CHECK on a Nomad client the plugin takes only
``NOMAD_ALLOC_ID`` from CNI_ARGS as Nomad's word and asks the local Nomad agent (the conflist's
``nomadAddr``, the ACL token in ``nomadTokenFile``; for https the CA in ``nomadCACert`` and, where Nomad verifies
its clients (``tls.verify_https_client``), the certificate and key in ``nomadClientCert``/``nomadClientKey``):

* ``GET /v1/allocations?prefix=<alloc_id>&namespace=*&task_states=false`` (``command/agent/alloc_endpoint.go``
  ``AllocsRequest`` -> ``nomad/alloc_endpoint.go`` ``Alloc.List``: ``AllocsByIDPrefix``, then ``Allocation.Stub``
  without task states; ``api/allocations.go`` ``Allocations.List``): the allocation's list stub
  (``AllocListStub`` in ``nomad/structs/alloc.go``): its ``Namespace``, ``JobID``, ``TaskGroup``, ``NodeName``,
  ``DesiredStatus`` and ``ClientStatus``. These, not CNI_ARGS, are the identity the MAC is checked against. Not
  ``GET /v1/allocation/:id``: Nomad's ``Allocation`` embeds its whole ``Job`` (``Alloc.GetAlloc``), which for a
  large session is megabytes per ADD; a stub is about 700 bytes whatever the job;
* ``GET /v1/allocations?namespace=<ns>&task_states=false&filter=JobID == "<job>" and TaskGroup == "<group>"``
  (``Alloc.List`` again; the filter is go-bexpr, evaluated on each Allocation by ``nomad/state/paginator``): the
  group's allocations, to find another live one. ``Alloc.List`` reads the namespace's allocations table
  (``AllocsByNamespaceOrdered``), so every incarnation of the job is there: what ``all=true`` gives
  ``/v1/job/:id/allocations``, whose ``AllocsByJob`` otherwise keeps only allocations of the job's current
  ``CreateIndex``. Only the group's stubs come back, not the whole job's (1,024 stubs for a 1,024-container
  session);
* with args version 4, once per session on an agent (its first ADD there): ``GET /v1/var/<path>?namespace=<BAI_TNS>``
  for each chunk of the session's agent table (``command/agent/variable_endpoint.go`` -> ``nomad/
  variables_endpoint.go`` ``Variables.Read``; ``api/variables.go`` ``Variables.Read``): its items, which the
  plugin admits only when their digest is the signed ``BAI_TAB`` (``_session_network.resolve_table``).

The allocation look-ups need ``read-job`` in the allocation's namespace (``Alloc.List`` checks
``AllowNsOp(namespace, NamespaceCapabilityReadJob)``, and with ``namespace=*`` keeps only allocations of
namespaces the token may read: ``allowedNSes``); the table needs ``read`` on its path
(``Variables.Read``: ``AllowVariableOperation(ns, path, PolicyRead, ...)``). The token's policy is::

    namespace "*" { capabilities = ["read-job"] }          # or the sessions' namespaces only
    namespace "default" {                                  # the claims namespace
      variables { path "backendai-cluster/network/agents/*" { capabilities = ["read"] } }
    }

Without ``read-job`` the allocation is not listed (as if unknown) and the group's listing answers 403; without
the variable's ``read``, 403. An allocation is *live* while Nomad wants it running (``DesiredStatus`` ``run``)
and its client has not finished it (``ClientStatus`` ``pending`` or ``running``: Nomad's
``Allocation.ClientTerminalStatus`` is the others).

HTTP is written out over ``_socket`` (an HTTP/1.0 GET, the answer read to its end: Go's ``net/http``
then neither keeps the connection nor chunks the body): ``http.client`` with ``email`` and ``socket``
costs ~30 ms to import under ``python3 -IS``, about what the whole ADD costs; ``_socket`` costs 0.2 ms.
https needs ``ssl`` (and OpenSSL), imported only then.
"""

from __future__ import annotations

import _socket

TYPE_CHECKING = False
if TYPE_CHECKING:
    import typing as t

try:
    from ansible_collections.backendai.cluster.plugins.module_utils._network import _cni_system as system
    from ansible_collections.backendai.cluster.plugins.module_utils._network import _session_network as net
except ImportError:  # installed on an agent: the other files lie next to this one
    import _cni_system as system  # type: ignore[no-redef]
    import _session_network as net  # type: ignore[no-redef]

PluginError, E_ADMISSION, E_CONFIG, E_TRY_LATER = system.PluginError, system.E_ADMISSION, system.E_CONFIG, system.E_TRY_LATER
TIMEOUT = 10.0
MAX_ANSWER = 64 << 20
LIVE_CLIENT_STATUSES = ("pending", "running")
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")


def quote(text: str) -> str:
    """``text`` percent-encoded for a URL path segment or query value (what ``urllib.parse.quote(text, "")`` does)."""
    return "".join(c if c in _SAFE else "".join("%%%02X" % b for b in c.encode("utf-8")) for c in text)


def _address(addr: str) -> t.Tuple[str, str, int]:
    """(scheme, host, port) of ``http(s)://host[:port]``."""
    scheme, sep, rest = addr.partition("://")
    host = rest.split("/", 1)[0]
    if not sep or scheme not in ("http", "https") or not host:
        raise PluginError(E_CONFIG, "nomadAddr must be http://HOST:PORT or https://HOST:PORT, got %r" % addr)
    if host.startswith("["):
        name, port = host[1:].partition("]")[::2]
        port = port[1:]
    elif ":" in host:
        name, port = host.rpartition(":")[::2]
    else:
        name, port = host, ""
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise PluginError(E_CONFIG, "nomadAddr %r has no valid port" % addr)
    return scheme, name, int(port or (443 if scheme == "https" else 80))


def loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback: ``localhost``, ``::1`` or an address in 127.0.0.0/8."""
    if host in ("localhost", "::1"):
        return True
    try:
        return net.ip4(host) >> 24 == 127
    except ValueError:
        return False


class NomadAgent:
    """The local Nomad agent's HTTP API, as the plugin's config names it.

    Plain http is refused to any address off loopback unless the config opts in (``nomadAllowPlainHTTP``): the
    token would cross the wire in clear, and whatever answers at that address (any process that takes the port, a
    task on the host network) would be taken for Nomad. On loopback the operator keeps Nomad's HTTP listener bound
    there (``addresses.http``), so that no other process can take the port first."""

    def __init__(self, cfg: system.Config) -> None:
        self.cfg = cfg
        self.scheme, self.host, self.port = _address(cfg.nomad_addr)
        if self.scheme == "http" and not loopback(self.host) and not cfg.nomad_plain_http:
            raise PluginError(E_CONFIG, "nomadAddr %r is plain http to an address off loopback: the Nomad token would "
                              "cross the network in clear and whatever answers there would be taken for Nomad; use "
                              "https (nomadCACert, and nomadClientCert/nomadClientKey where Nomad verifies clients) or "
                              "set nomadAllowPlainHTTP to true to accept the risk" % cfg.nomad_addr)
        self.token = ""
        if cfg.nomad_token_file:
            try:
                with open(cfg.nomad_token_file, encoding="utf-8") as f:
                    self.token = f.read().strip()
            except OSError as e:
                raise PluginError(E_CONFIG, "cannot read the Nomad token file %s: %s"
                                  % (cfg.nomad_token_file, e.strerror or e)) from None

    def _connect(self) -> t.Any:
        last: t.Optional[OSError] = None
        for family, kind, proto, _name, where in _socket.getaddrinfo(self.host, self.port, 0, _socket.SOCK_STREAM):
            sock = _socket.socket(family, kind, proto)
            sock.settimeout(TIMEOUT)
            try:
                sock.connect(where)
            except OSError as e:
                sock.close()
                last = e
                continue
            if self.scheme == "https":
                import socket as socket_module  # ssl wraps socket.socket objects
                import ssl
                ctx = ssl.create_default_context(cafile=self.cfg.nomad_ca_file or None)
                if self.cfg.nomad_cert_file:
                    ctx.load_cert_chain(self.cfg.nomad_cert_file, self.cfg.nomad_key_file)
                sock = ctx.wrap_socket(socket_module.socket(fileno=sock.detach()), server_hostname=self.host)
            return sock
        raise last or OSError("no address for %s" % self.host)

    def get(self, path: str) -> t.Tuple[int, bytes]:
        """(status, body) of ``GET path``; PluginError (try later) if the agent cannot be reached."""
        head = "GET %s HTTP/1.0\r\nHost: %s:%d\r\nAccept: application/json\r\nUser-Agent: backendai-cni\r\n" % (
            path, self.host, self.port)
        if self.token:
            head += "X-Nomad-Token: %s\r\n" % self.token
        chunks = []
        try:
            sock = self._connect()
            try:
                sock.sendall((head + "\r\n").encode("utf-8"))
                size = 0
                while True:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > MAX_ANSWER:
                        raise OSError("the answer is larger than %d bytes" % MAX_ANSWER)
            finally:
                sock.close()
        except OSError as e:
            raise PluginError(E_TRY_LATER, "backendai session network: the local Nomad agent at %s cannot be asked "
                              "about the allocation: %s" % (self.cfg.nomad_addr, e)) from None
        answer = b"".join(chunks)
        head_bytes, sep, body = answer.partition(b"\r\n\r\n")
        status_line = head_bytes.split(b"\r\n", 1)[0].split()
        if not sep or len(status_line) < 2 or not status_line[1].isdigit():
            raise PluginError(E_TRY_LATER, "backendai session network: the local Nomad agent at %s sent no HTTP "
                              "answer" % self.cfg.nomad_addr)
        return int(status_line[1]), body

    def get_json(self, path: str, what: str, needs: str = "read-job in the allocation's namespace") -> t.Any:
        status, body = self.get(path)
        text = body.decode("utf-8", "replace")
        if status == 200:
            try:
                return system.json_loads(text)
            except ValueError as e:
                raise PluginError(E_TRY_LATER, "backendai session network: %s from the local Nomad agent is not "
                                  "JSON: %s" % (what, e)) from None
        if status == 404:
            return None
        if status == 403:
            raise PluginError(E_CONFIG, "backendai session network: the local Nomad agent refused to show %s (403 %s): "
                              "the token in %s needs %s"
                              % (what, text.strip()[:200], self.cfg.nomad_token_file or "(no token file)", needs))
        raise PluginError(E_TRY_LATER, "backendai session network: the local Nomad agent answered %d to the look-up "
                          "of %s: %s" % (status, what, text.strip()[:200]))


def live(alloc: t.Mapping[str, t.Any]) -> bool:
    return alloc.get("DesiredStatus") == "run" and alloc.get("ClientStatus") in LIVE_CLIENT_STATUSES


def _refuse(why: str) -> PluginError:
    return PluginError(E_ADMISSION, "backendai session network: admission refused: " + why)


def confirmed_identity(cfg: system.Config, cni_args: t.Mapping[str, str], container_id: str
                       ) -> t.Tuple[t.Tuple[str, str, str], NomadAgent]:
    """(namespace, job, group) of the allocation ``NOMAD_ALLOC_ID`` names, as the local Nomad agent has it, after
    checking that it is this container's allocation, runs on this agent and is live; and the agent's API, for
    :func:`check_only_live`."""
    cfg.require_agent_name()
    alloc_id = cni_args.get(net.ALLOC_KEY, "")
    if not alloc_id:
        raise _refuse("CNI_ARGS lack NOMAD_ALLOC_ID: Nomad 1.10 or later adds it; an older client or another "
                      "runtime cannot join a session network")
    if not net._is_uuid(alloc_id):
        raise _refuse("NOMAD_ALLOC_ID %r is not an allocation ID (a UUID)" % alloc_id[:64])
    # Nomad's client attaches an allocation as the CNI container of the allocation's own ID (networking_cni.go:
    # c.cni.Setup(ctx, alloc.ID, ...), on every version with CNI): a job that names another allocation in its own
    # args (a client older than 1.10 passes them unchanged) does not get that allocation's container ID.
    if container_id != alloc_id:
        raise _refuse("CNI_CONTAINERID %r is not the allocation NOMAD_ALLOC_ID names (%s): Nomad attaches an "
                      "allocation as the container of its own ID" % (container_id[:64], alloc_id))
    nomad = NomadAgent(cfg)
    alloc = allocation_stub(nomad, alloc_id)
    if alloc is None:  # Alloc.List leaves out allocations of namespaces the token may not read
        raise _refuse("the local Nomad agent knows no allocation %s (or the token in %s lacks read-job in its "
                      "namespace)" % (alloc_id, cfg.nomad_token_file or "(no token file)"))
    identity = (str(alloc.get("Namespace") or ""), str(alloc.get("JobID") or ""), str(alloc.get("TaskGroup") or ""))
    where = "allocation %s (job %r, group %r in namespace %r)" % ((alloc_id,) + identity[1:] + identity[:1])
    if alloc.get("ID") != alloc_id:
        raise _refuse("the local Nomad agent answered another allocation (%r) for %s" % (alloc.get("ID"), alloc_id))
    if alloc.get("NodeName") != cfg.agent_name:
        raise _refuse("%s runs on node %r, not on this agent (%r)" % (where, alloc.get("NodeName"), cfg.agent_name))
    if not live(alloc):
        raise _refuse("%s is not live (desired %s, client %s)"
                      % (where, alloc.get("DesiredStatus"), alloc.get("ClientStatus")))
    return identity, nomad


def allocation_stub(nomad: NomadAgent, alloc_id: str) -> t.Optional[t.Dict[str, t.Any]]:
    """The list stub of allocation ``alloc_id`` (a UUID: the prefix names exactly it), or None."""
    stubs = nomad.get_json("/v1/allocations?prefix=%s&namespace=*&task_states=false" % quote(alloc_id),
                           "allocation %s" % alloc_id)
    found = [a for a in stubs if isinstance(a, dict) and a.get("ID") == alloc_id] if isinstance(stubs, list) else []
    return found[0] if len(found) == 1 else None


def _bexpr_string(text: str) -> str:
    """``text`` as a go-bexpr string literal (Go's quoted string: ``\\`` and ``\"`` escaped)."""
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


def group_allocations(nomad: NomadAgent, identity: t.Tuple[str, str, str]) -> t.List[t.Dict[str, t.Any]]:
    """The list stubs of every allocation of the group (every incarnation of its job: ``Alloc.List`` reads them all)."""
    namespace, job_id, group = identity
    expr = "JobID == %s and TaskGroup == %s" % (_bexpr_string(job_id), _bexpr_string(group))
    stubs = nomad.get_json("/v1/allocations?namespace=%s&task_states=false&filter=%s" % (quote(namespace), quote(expr)),
                           "the allocations of job %r" % job_id)
    if not isinstance(stubs, list):
        raise _refuse("the local Nomad agent lists no allocations of job %r in namespace %r" % (job_id, namespace))
    return [a for a in stubs if isinstance(a, dict)]


def check_only_live(nomad: NomadAgent, identity: t.Tuple[str, str, str], alloc_id: str) -> None:
    """Refuse if the group has another live allocation than ``alloc_id`` (a session's group runs exactly one: more
    come only from ``scale`` or another change outside the collection)."""
    namespace, job_id, group = identity
    stubs = group_allocations(nomad, identity)
    others = sorted(str(a.get("ID")) for a in stubs if a.get("TaskGroup") == group and a.get("JobID") == job_id
                    and a.get("Namespace", namespace) == namespace and a.get("ID") != alloc_id and live(a))
    if others:
        raise _refuse("group %r of job %r in namespace %r has another live allocation (%s) besides %s: a session's "
                      "group runs one allocation (was it scaled?)" % (group, job_id, namespace, ", ".join(others),
                                                                      alloc_id))


def agent_table(nomad: NomadAgent, ref: "net.TableRef") -> t.List[t.Optional[t.Dict[str, t.Any]]]:
    """The items of each variable of a session's agent table (None for a missing one), read in the table's
    namespace; checked against its digest by ``_session_network.resolve_table``."""
    out = []
    for path in ref.paths:
        var_path = "/".join(quote(p) for p in path.split("/"))
        var = nomad.get_json("/v1/var/%s?namespace=%s" % (var_path, quote(ref.namespace)),
                             "the session's agent table %s (namespace %s)" % (path, ref.namespace),
                             "read on %s/* in namespace %s" % (net.TABLE_PREFIX, ref.namespace))
        out.append(var.get("Items") if isinstance(var, dict) and isinstance(var.get("Items"), dict) else None)
    return out
