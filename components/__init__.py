"""The lab-mgmt components: one ComponentResource per link of the management cluster's graph."""
