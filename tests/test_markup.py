"""Inline markup: parsing and its errors, tag placement from given word alignments, and the help pages' paragraphs
with their tags (the plain extraction unchanged)."""

import collections
import pathlib
import random
import tempfile
import unittest

import lxml.html

from bench import help_markup
from t2t_keras.data import help_html
from t2t_keras.decoding.markup import MarkupError, parse_markup, strip_markup
from t2t_keras.decoding.tag_placement import place_tags
from t2t_keras.errors import T2TError
from tests.test_libreoffice_corpus import PAGES, write_tree


def tags(text):
    """The opening texts of a marked text's tags, counted (parsing also checks they are well nested)."""
    return collections.Counter(tag.open_text for tag in parse_markup(text).tag_list())


def wrapped(text):
    """`{opening text: [covered word indices, ...]}` of a marked text."""
    marked = parse_markup(text)
    found = collections.defaultdict(list)
    for tag in marked.tag_list():
        found[tag.open_text].append(marked.covered_words(tag))
    return dict(found)


def place(source, translation, links):
    return place_tags(parse_markup(source), translation, links)


class ParseTest(unittest.TestCase):
    def test_plain_text_words_and_tag_spans(self):
        marked = parse_markup('Choose <link href="a.html"><emph>File</emph> - New</link> &amp; <br/>go &lt;now&gt;.')
        self.assertEqual(marked.plain, "Choose File - New & go <now>.")
        link, br = marked.tags
        self.assertEqual((link.open_text, link.close_text), ('<link href="a.html">', "</link>"))
        self.assertEqual(marked.covered_words(link), [1, 2, 3])
        self.assertEqual(marked.covered_words(link.children[0]), [1])
        self.assertTrue(br.self_closing)
        self.assertEqual(marked.anchor_word(br.start), 4)  # after "&"
        self.assertEqual([t.order for t in marked.tag_list()], [0, 1, 2])

    def test_a_tag_inside_a_word_covers_the_word(self):
        marked = parse_markup("Auto<emph>Correct</emph> options")
        self.assertEqual(marked.plain, "AutoCorrect options")
        self.assertEqual(marked.covered_words(marked.tags[0]), [0])

    def test_bad_markup_names_the_sentence_the_tag_and_the_fix(self):
        cases = {
            "Choose <emph>File now.": ("never closed", "<emph>", "add </emph>"),
            "Choose File</emph> now.": ("closes no open tag", "</emph>", "remove it"),
            "<emph>Choose <item>File</emph></item>": ("cross", "</item> before </emph>", "nest"),
            "<emph>File</item></emph>": ("closes no open tag", "</item>", "<emph>"),
            "a < b": ("opens no tag", "&lt;", "character 2"),
        }
        for text, expected in cases.items():
            with self.assertRaises(MarkupError) as caught:
                parse_markup(text, "line 7")
            self.assertIsInstance(caught.exception, T2TError)
            message = str(caught.exception)
            self.assertIn("line 7", message)
            self.assertIn(text[:10], message)
            for part in expected:
                self.assertIn(part, message)

    def test_strip_markup(self):
        self.assertEqual(strip_markup("<ahelp>Saves <emph>all</emph>.</ahelp>"), "Saves all.")


class PlacementTest(unittest.TestCase):
    def test_monotone_alignment_gives_the_source_markup_back(self):
        source = 'Choose <item type="menuitem">File - New</item> and <link href="x"><emph>Save</emph> it</link> now'
        words = strip_markup(source).split()
        self.assertEqual(place(source, " ".join(words), [(i, i) for i in range(len(words))]), source)

    def test_reordered_words_take_their_tags_along(self):
        self.assertEqual(place("the <emph>red</emph> car", "das Auto rot", [(0, 0), (1, 2), (2, 1)]),
                         "das Auto <emph>rot</emph>")
        self.assertEqual(place("<emph>red</emph> <b>car</b>", "Auto rot", [(0, 1), (1, 0)]),
                         "<b>Auto</b> <emph>rot</emph>")

    def test_a_span_covers_min_to_max_of_its_linked_words(self):
        self.assertEqual(place("Click <emph>the new button</emph> now", "Klicken jetzt die neue Taste",
                               [(0, 0), (1, 2), (2, 3), (3, 4), (4, 1)]),
                         "Klicken jetzt <emph>die neue Taste</emph>")
        self.assertEqual(place("<emph>a b</emph> c", "x y z", [(0, 0), (1, 2), (2, 1)]),
                         "<emph>x y z</emph>")  # gaps included

    def test_nested_tags_stay_nested(self):
        result = place('<link href="h"><emph>File</emph> menu</link> opens', "Das Menü Datei öffnet",
                       [(0, 2), (1, 1), (2, 3)])
        self.assertEqual(result, 'Das <link href="h">Menü <emph>Datei</emph></link> öffnet')

    def test_self_closing_tags_follow_the_word_before_them(self):
        self.assertEqual(place("Press<br/> Enter now", "Jetzt Enter drücken", [(0, 2), (1, 1), (2, 0)]),
                         "Jetzt Enter drücken<br/>")
        self.assertEqual(place("<br/>Press now", "Jetzt drücken", [(0, 1), (1, 0)]), "<br/>Jetzt drücken")

    def test_a_span_with_no_links_wraps_nothing_after_the_word_before_it(self):
        self.assertEqual(place("Press <emph>here</emph> now", "Jetzt drücken", [(0, 1), (2, 0)]),
                         "Jetzt drücken<emph></emph>")
        self.assertEqual(place("a <emph>b</emph> c", "x y", [(0, 0), (2, 1)]), "x<emph></emph> y")
        self.assertEqual(place('<emph><image src="i"/></emph> Save', "Speichern", [(0, 0)]),
                         '<emph><image src="i"/></emph>Speichern')

    def test_crossing_target_spans_are_made_to_nest(self):
        result = place("<a>x y</a> <b>z</b>", "p q r", [(0, 0), (1, 1), (2, 1), (1, 2)])
        self.assertEqual(result, "<a>p <b>q</b> r</a>")  # b's target lies inside a's: nested there
        result = place("<a>x</a> <b>y</b>", "p q r", [(0, 0), (0, 1), (1, 1), (1, 2)])
        self.assertEqual(result, "<a>p q</a> <b>r</b>")  # crossing: b starts where a ends
        result = place("<a>x</a> <b>y <c>z</c></b>", "p q r", [(0, 0), (0, 1), (1, 2), (2, 1)])
        self.assertEqual(result, "<a>p q</a> <b><c></c>r</b>")  # c's word left to b's shortened range: at its edge

    def test_target_text_is_escaped(self):
        result = place("<emph>x</emph> y", "a<b & c", [(0, 0), (1, 1)])
        self.assertEqual(result, "<emph>a&lt;b</emph> &amp; c")
        self.assertEqual(strip_markup(result), "a<b & c")

    def test_every_tag_once_well_nested_words_kept_for_random_markup_and_links(self):
        rng = random.Random(0)
        for _ in range(300):
            source = random_markup(rng)
            source_words = strip_markup(source).split()
            target = " ".join(f"w{k}" for k in range(rng.randint(0, 7)))
            links = [(rng.randrange(len(source_words)), rng.randrange(len(target.split())))
                     for _ in range(rng.randint(0, 8))] if source_words and target else []
            result = place(source, target, links)
            self.assertEqual(tags(result), tags(source), (source, target, links, result))
            self.assertEqual(strip_markup(result), " ".join(target.split()))


def random_markup(rng, depth=0):
    """A random well-nested marked sentence of words `s0 s1 …` with paired and self-closing tags."""
    parts = []
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        if choice < 0.25 and depth < 3:
            name = rng.choice("abc")
            parts.append(f'<{name} n="{rng.randint(0, 9)}">{random_markup(rng, depth + 1)}</{name}>')
        elif choice < 0.35:
            parts.append("<br/>")
        else:
            parts.append(f"s{rng.randint(0, 99)}")
    return " ".join(parts)


class HelpMarkupTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        root = pathlib.Path(cls.tmp.name)
        for lang in ("en", "de"):
            write_tree(root / lang, lang, PAGES)
        cls.roots = [help_html.find_help_root(root / lang) for lang in ("en", "de")]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_paragraphs_keep_their_inline_tags(self):
        page = help_markup.page_marked_paragraphs(self.roots[0] / "text/shared/a.html")
        self.assertEqual(page[("par_id1", 0)], "<ahelp>Specifies <emph>general</emph> settings.</ahelp>")
        self.assertEqual(page[("par_id2", 0)], "Choose <emph>Tools - Options</emph> <emph>- Load/Save</emph>.")
        self.assertEqual(page[("par_id6", 0)], 'Press<br/> the <link href="x.html">Enter</link> key.')
        self.assertEqual(page[("hd_id1", 0)], "Load/Save options")
        self.assertNotIn(("par_id5", 0), page)  # code is skipped, as in the plain corpus

    def test_without_tags_the_text_is_the_plain_extraction(self):
        for lang_root in self.roots:
            for page in help_html.list_pages(lang_root):
                plain = help_html.page_paragraphs(lang_root / page)
                marked = help_markup.page_marked_paragraphs(lang_root / page)
                self.assertEqual(plain.keys(), marked.keys())
                for key, text in marked.items():
                    self.assertEqual(strip_markup(text), plain[key], key)

    def test_element_mapping(self):
        html_text = ('<p id="par_id9">Use <span class="menuitem">Edit</span>, <span class="keycode">Ctrl</span>, '
                     '<a href="de/text/shared/01/x.html#bm">this</a> <span class="emph"> </span>'
                     '<img src="media/i.svg" alt="Icon"> <span class="other">plain</span> '
                     '<a name="anchor">too</a>.</p>')
        element = lxml.html.fragment_fromstring(html_text)
        self.assertEqual(help_markup.marked_text(element),
                         'Use <item type="menuitem">Edit</item>, <item type="keycode">Ctrl</item>, '
                         '<link href="text/shared/01/x.html#bm">this</link><image src="media/i.svg"/> plain too.')
        self.assertEqual(strip_markup(help_markup.marked_text(element)), help_html.element_text(element))

    def test_marked_pairs_hold_tags_and_translations(self):
        pairs = help_markup.marked_pairs(self.roots[0], self.roots[1], help_html.list_pages(self.roots[0]))
        found = {(p.page, p.paragraph_id): (p.source, p.target) for p in pairs}
        self.assertEqual(found[("text/shared/a.html", "par_id1")],
                         ("<ahelp>Specifies <emph>general</emph> settings.</ahelp>",
                          "<ahelp>Legt <emph>allgemeine</emph> Einstellungen fest.</ahelp>"))
        self.assertNotIn(("text/shared/a.html", "hd_id1"), found)  # no tags
        self.assertNotIn(("text/swriter/b.html", "par_id1"), found)
        self.assertEqual(found[("text/shared/a.html", "par_id6")][1],
                         'Drücken Sie<br/> die <link href="x.html">Eingabetaste</link>.')

    def test_split_pairs_are_the_corpus_pairs_of_the_split_with_markup(self):
        test = help_markup.marked_split_pairs(self.roots[0], self.roots[1], "test")  # a tiny tree: all of it
        self.assertEqual([(p.paragraph_id, p.source_plain) for p in test],
                         [("par_id1", "Specifies general settings."),
                          ("par_id2", "Choose Tools - Options - Load/Save."), ("par_id6", "Press the Enter key.")])
        self.assertEqual(help_markup.marked_split_pairs(self.roots[0], self.roots[1], "dev"), [])


if __name__ == "__main__":
    unittest.main()
