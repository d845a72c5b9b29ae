# Copyright (c) 2026, backendai.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A torch-style ``env://`` rendezvous as a user command, for the single-node and multi-node session tests.

PyTorch's ``env://`` init reads MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK: rank 0 listens on
MASTER_PORT, every other rank connects to MASTER_ADDR:MASTER_PORT. RENDEZVOUS does exactly that with
plain sockets (torch's wheel is GBs and is not needed to check the wiring): it completes only if the
names resolve, the port is reachable inside the session network and the ranks are right. Rank 0 prints
``rendezvous complete: [1, 2, ...]``, every other rank ``rank N joined MASTER_ADDR``.
"""

RENDEZVOUS = r"""
import os, socket, sys, time
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if rank == 0:
    srv = socket.create_server(("0.0.0.0", port))
    srv.settimeout(20)
    seen = []
    for _ in range(world - 1):
        conn, _peer = srv.accept()
        seen.append(int(conn.recv(16).decode()))
        conn.close()
    print("rendezvous complete:", sorted(seen))
else:
    deadline = time.time() + 20
    while True:
        try:
            with socket.create_connection((addr, port), timeout=2) as c:
                c.sendall(str(rank).encode())
            break
        except OSError:
            if time.time() > deadline:
                sys.exit("rank %d could not reach %s:%d" % (rank, addr, port))
            time.sleep(0.1)
    print("rank", rank, "joined", addr)
"""
