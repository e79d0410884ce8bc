"""The systems compared, as results.json and the report name them."""

SYSTEMS = ("zookeeper", "stoa", "etcd")
SHORT = {"zookeeper": "ZK", "stoa": "Stoa", "etcd": "etcd"}
LONG = {"zookeeper": "ZooKeeper", "stoa": "Stoa", "etcd": "etcd"}
COLORS = {"zookeeper": "tab:blue", "stoa": "tab:orange", "etcd": "tab:green"}
