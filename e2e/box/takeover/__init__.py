"""The owner's takeover as docs/adoption.md writes it (issue 40): the lab as its owner runs it
today (owners_lab.py: the playbook's management cluster, lab1 made with clusterctl, Cilium and an
autoscaler installed by hand), the page read as a script (doc_script.py) and typed on it
(journey.py). A scenario here is named to e2e.engine.netns as `takeover.MODULE.FUNCTION`."""
