"""The inter-node link's codec (``codec.py``): what one node of a cluster sends another,
sans-IO. The link's front end is ``server/cluster_link/``, its dialer ``cluster/link.py``."""
