"""The inter-node link's listening side: a peer node as a client of this node's core
(``frontend.py``). Its codec is ``protocol/cluster/``; the dialing side ``cluster/link.py``."""
