"""The scaling advisor (issue #51; docs/advisor.md): predict a data-parallel run's images/s from measured parts.

- `model`: the model (a link's alpha-beta fit, the ring allreduce, the exposed communication, a step's bound), its
  inputs checked in one place, its declaration (analysis/reference/advisor.toml) and the thesis's validation rows;
- `runs`: each throughput run of experiment 3 beside the model's prediction for its own placement;
- `local`: those rows on the local cluster at several link rates, the validation's CSV and figure.

The package imports none of them: a caller names the one it uses, so importing one adds no layer of imports.
"""
