"""Corpus-scale translation, scoring and preparation as Apache Beam pipelines (the `--runner` of translate, score,
prepare and distill).

Nothing here is imported unless a command is given `--runner`: Apache Beam is the optional extra
`pip install 't2t_keras[beam]'`. The parts:

    artifact_handler   a RunInference model handler opening any artifact (`artifacts.open_artifact`) once per
                       worker process, shared by its threads; batches from Beam's BatchElements
    line_checks        reading numbered lines through Beam's file systems; the bad ones (invalid UTF-8, NUL,
                       over-long, a pair with a side missing) become dead-letter records
    line_pipeline      read -> check -> RunInference (failed batches retried line by line) -> group by file ->
                       sort by line number -> one file per input, written atomically; the dead-letter file
    pipeline_paths     the inputs a glob names, the output file of each, and the refusals made before a run
    runner_options     --runner, --workers and any other pipeline flag as Beam's PipelineOptions; a worker
                       process of the local runner that stopped, recognized in a failed pipeline
    corpus_pipeline    prepare: read, clean, filter, de-duplicate, tokenize and write the shards `train` reads
    corpus_command     prepare --runner: the run's tokenizer, the corpus pipeline, the manifest `train` reads
    teacher_pass       distill --runner: each shard of the teacher's sources translated by the line pipeline
    commands           translate and score --runner
"""
