"""Placing one pod: kube-scheduler's findNodesThatFitPod, prioritizeNodes and selectHost.

`schedule.Algorithm.schedule_pod` is the one function every caller uses (the scheduling cycle,
`policyd explain`, `policyd test`); `feasibility` holds the node window and nominated pods, `scoring`
the normalisation and weighting, `selection` the tie draw, `reuse` the cache of node results between
equivalent pods in front of the evaluator protocol, `columns` the node columns the vectorised plans read.
"""
