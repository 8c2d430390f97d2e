"""`policyd bench`: scheduler_perf-like workloads, run in-process or end to end against a real API server.

`workloads` defines the workloads; `inprocess` runs one through the real Scheduler on the simulated
back-end; `e2e` runs one against a fresh kube-apiserver + etcd (`policyd.envtest`) with `policyd run`
and kube-scheduler as processes (`e2e_schedulers`), and `e2e_report` turns their metrics into
figures; `results` is what both write (machine description, result files).
"""
