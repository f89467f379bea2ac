# SPDX-License-Identifier: Apache-2.0
"""Multicast groups in the packet replication engine: one group per session with one node per
rank (replication id = rank, so the egress rewrites each copy, docs/protocol.md §12), one
"sender" group per worker port for the offender's copy of a poisoned round, and the flood group
of L2 forwarding with the ingress port pruned.

Pruning: the PRE skips a copy when its node's RID equals the packet's ingress RID and its port
is in the prune set of the packet's level2_exclusion_id. The flood node has RID 0, as a flood
packet's ingress RID is; every dpa packet carries RID_DPA (p4/types.p4), which no node has, so
none of its copies is pruned whatever the ranks' ports (rank 0 on dev port 0 included).
"""

RID_SENDER = 0xFFFF
RID_DPA = 0xFFFE              # the ingress RID of dpa packets (p4/types.p4): no node's RID
SESSION_NODE_BASE = 0x10000   # node ids: session groups
SENDER_NODE_BASE = 0x20000    # node ids: sender groups
FLOOD_NODE = 0x30000


def _group(bfrt, mgid, node_ids):
    bfrt.pre.mgid.add(MGID=mgid, MULTICAST_NODE_ID=node_ids,
                      MULTICAST_NODE_L1_XID_VALID=[False] * len(node_ids),
                      MULTICAST_NODE_L1_XID=[0] * len(node_ids))


def setup(program, config, worker_ports):
    """Sender groups for every worker port, and the flood group over every worker port."""
    bfrt = program.bfrt
    base = config.program["DPA_SENDER_MGID_BASE"]
    for number in sorted(set(worker_ports.values())):
        node = SENDER_NODE_BASE + number
        bfrt.pre.node.add(MULTICAST_NODE_ID=node, MULTICAST_RID=RID_SENDER, MULTICAST_LAG_ID=[],
                          DEV_PORT=[number])
        _group(bfrt, base + number, [node])
        bfrt.pre.prune.add(MULTICAST_L2_XID=number, DEV_PORT=[number])
    bfrt.pre.node.add(MULTICAST_NODE_ID=FLOOD_NODE, MULTICAST_RID=0, MULTICAST_LAG_ID=[],
                      DEV_PORT=sorted(set(worker_ports.values())))
    _group(bfrt, config.flood_mgid, [FLOOD_NODE])


def publish_session(program, session, rank_ports, had_group):
    """The session's group for a new generation: rank r's copy leaves on rank_ports[r]."""
    bfrt = program.bfrt
    if had_group:
        bfrt.pre.mgid.delete(MGID=session.mgid)
        for rank in range(session.world_size):
            bfrt.pre.node.delete(MULTICAST_NODE_ID=SESSION_NODE_BASE + session.index * 64 + rank)
    nodes = []
    for rank in sorted(rank_ports):
        node = SESSION_NODE_BASE + session.index * 64 + rank
        bfrt.pre.node.add(MULTICAST_NODE_ID=node, MULTICAST_RID=rank, MULTICAST_LAG_ID=[],
                          DEV_PORT=[rank_ports[rank]])
        nodes.append(node)
    _group(bfrt, session.mgid, nodes)
