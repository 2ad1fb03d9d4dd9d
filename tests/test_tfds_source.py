"""Tests of t2t_keras.data.tfds_source on mocked TFDS data (nothing is downloaded)."""

import tempfile
from unittest import mock

import tensorflow as tf
import tensorflow_datasets as tfds

from t2t_keras.data.tfds_source import load_tfds_pairs
from t2t_keras.errors import DataError
from tests.helpers import TestCase

NUM_EXAMPLES = 4


def _examples(name, split):
    """The mocked examples as dicts of language -> bytes, read straight from TFDS."""
    return list(tfds.load(name, split=split).as_numpy_iterator())


class LoadTfdsPairsTest(TestCase):
    def setUp(self):
        super().setUp()
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.data_dir = tmp.name
        # mock_data turns download_and_prepare into a no-op and yields random examples.
        mocked = tfds.testing.mock_data(num_examples=NUM_EXAMPLES)
        mocked.__enter__()
        self.addCleanup(mocked.__exit__, None, None, None)

    def assert_direction(self, name, split, source_lang, target_lang):
        pairs = list(
            load_tfds_pairs(name, split, source_lang, target_lang, self.data_dir).as_numpy_iterator()
        )
        examples = _examples(name, split)
        self.assertLen(pairs, NUM_EXAMPLES)
        self.assertEqual([s for s, _ in pairs], [e[source_lang] for e in examples])
        self.assertEqual([t for _, t in pairs], [e[target_lang] for e in examples])
        # Random mock text differs between the languages, so the direction is observable.
        self.assertNotEqual(pairs[0][0], pairs[0][1])

    def test_wmt14_both_directions(self):
        self.assert_direction("wmt14_translate/de-en", "train", "en", "de")
        self.assert_direction("wmt14_translate/de-en", "validation", "de", "en")

    def test_wmt_t2t_both_directions(self):
        self.assert_direction("wmt_t2t_translate/de-en", "train", "en", "de")
        self.assert_direction("wmt_t2t_translate/de-en", "test", "de", "en")

    def test_ted_hrlr_both_directions(self):
        self.assert_direction("ted_hrlr_translate/pt_to_en", "train", "pt", "en")
        self.assert_direction("ted_hrlr_translate/pt_to_en", "validation", "en", "pt")

    def test_element_spec_is_a_pair_of_scalar_strings(self):
        ds = load_tfds_pairs("wmt14_translate/de-en", "train", "en", "de", self.data_dir)
        scalar_string = tf.TensorSpec(shape=(), dtype=tf.string)
        self.assertEqual(ds.element_spec, (scalar_string, scalar_string))

    def test_language_not_in_config(self):
        with self.assertRaises(DataError) as context:
            load_tfds_pairs("wmt14_translate/de-en", "train", "en", "fr", self.data_dir)
        message = str(context.exception)
        self.assertIn("wmt14_translate/de-en", message)
        self.assertIn("'fr'", message)
        self.assertIn("('de', 'en')", message)

    def test_same_source_and_target_language(self):
        with self.assertRaisesRegex(DataError, "two different languages"):
            load_tfds_pairs("ted_hrlr_translate/pt_to_en", "train", "en", "en", self.data_dir)

    def test_unknown_dataset_and_config(self):
        with self.assertRaisesRegex(DataError, "no dataset 'no_such_dataset'"):
            load_tfds_pairs("no_such_dataset", "train", "en", "de", self.data_dir)
        with self.assertRaisesRegex(DataError, "xx-yy"):
            load_tfds_pairs("wmt14_translate/xx-yy", "train", "en", "de", self.data_dir)

    def test_not_a_translation_dataset(self):
        with self.assertRaisesRegex(DataError, "not a translation dataset"):
            load_tfds_pairs("mnist", "train", "en", "de", self.data_dir)

    def test_download_failure_is_a_data_error(self):
        failing = mock.patch.object(
            tfds.core.DatasetBuilder, "download_and_prepare", side_effect=OSError("no network")
        )
        with failing, self.assertRaisesRegex(DataError, "no network.*data_dir"):
            load_tfds_pairs("wmt14_translate/de-en", "train", "en", "de", self.data_dir)


if __name__ == "__main__":
    tf.test.main()
