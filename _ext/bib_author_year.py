"""Reference lists labelled by author and year, like the citations in the text.

``bibtex_reference_style: author_year`` makes ``{cite}`` print "Bach et al., 2015", but the
reference list keeps pybtex's default alpha labels ("[BBM+15]"). This extension registers the
pybtex formatting style ``author_year``, whose labels are built with sphinxcontrib-bibtex's own
author-year templates (so a label reads exactly like the citation that links to it), and whose
list is sorted by author, year and title. ``_config.yml`` selects it with
``bibtex_default_style: author_year``.
"""

from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from sphinxcontrib.bibtex.style.referencing import PersonStyle
from sphinxcontrib.bibtex.style.template import join, year


class _TemplateData:
    """The one attribute sphinxcontrib-bibtex's name templates read from a referencing style."""

    person = PersonStyle()


class AuthorYearLabelStyle(BaseLabelStyle):
    """Labels "Author, 2015", "Author and Other, 2019", "Author et al., 2015"; "a", "b", ...
    appended when two entries of one list would get the same label."""

    template = join(sep=", ")[_TemplateData.person.author_or_editor_or_title(full=False), year]

    def format_labels(self, sorted_entries):
        labels = [
            self.template.format_data({"entry": entry, "style": _TemplateData}).render_as("text")
            for entry in sorted_entries
        ]
        counts = {label: labels.count(label) for label in labels}
        seen = {}
        for label in labels:
            if counts[label] > 1:
                seen[label] = seen.get(label, 0) + 1
                label += "abcdefghijklmnopqrstuvwxyz"[seen[label] - 1]
            yield label


class AuthorYearStyle(UnsrtStyle):
    """pybtex's ``unsrt`` entry format, labelled and sorted by author and year."""

    default_label_style = AuthorYearLabelStyle
    default_sorting_style = "author_year_title"


def setup(app):
    register_plugin("pybtex.style.formatting", "author_year", AuthorYearStyle)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
