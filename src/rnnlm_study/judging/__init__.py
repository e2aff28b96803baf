"""Judging the study from its run folders (and git, for what is registered): the runs table, intervals and exact tests, the
claims as data decided by their registered rules in two passes, and the report that renders them
(reports/study.md, the figure, the CSV and JSON summaries)."""
