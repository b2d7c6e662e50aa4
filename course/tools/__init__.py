"""The course's hand-written tooling, apart from the lessons: notebook export and student copies (`nbtools`), the
command line (`cli`, `cli_train`; `python -m course` dispatches to them from course/__main__.py), the benchmark
(`bench`), the sm_90 compile test and its kernel signatures (`compile`, `signatures`), the dataset download
(`download`) and the teachers' tools (`teach`). No notebook imports from here."""
