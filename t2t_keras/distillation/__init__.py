"""Sequence-level knowledge distillation (Kim and Rush, 2016): a student trained on its teacher's translations.

    distill(teacher, student, config)     translate the teacher's training sources with the teacher, in shards
                                          that an interrupted run resumes, then train the student on them

teacher.py checks the teacher run and says what its translations depend on (its weights, the search settings, the
source corpus); distilled.py writes the translations in shards and resumes; student.py makes the student's config
and run directory (the teacher's vocabulary, the distilled corpus, the teacher's dev and test splits);
distill.py runs the steps in order. The student is an ordinary run, trained by `pipeline.train_run` as
`t2t-keras train` trains any run.
"""
