"""The analysis layer: what a run's manifest says after capture (report, verdict, timeline,
compare, HTML). Reads manifests only and imports only the leaves: never the runtime or the
integrations, so a report can be built on any machine from the files alone.
"""
