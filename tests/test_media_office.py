"""Word, Excel, PowerPoint and OpenDocument files read with the standard library: the text a reader
sees, in order, cut at the limit; a damaged, locked or hostile file refused with a reason."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from gateway.errors import MediaError
from gateway.events import Attachment
from gateway.media.office import is_legacy_office, office_format, read_office
from gateway.media.prepare import category
from tests.mediafiles import make_docx, make_odt, make_pptx, make_xlsx

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "1-0"
    path.write_bytes(data)
    return path


def test_a_word_file_gives_its_paragraphs_and_tables(tmp_path: Path) -> None:
    data = make_docx(["Project plan", "Owner:\tAlice"], table=[["Task", "Due"], ["Ship", "Friday"]])
    doc = read_office(write(tmp_path, data), 1000, "docx")
    assert (
        doc.text == "Project plan\nOwner:\tAlice\nTask | Due\nShip | Friday"
        and doc.truncated_chars == 0
    )


def test_a_workbook_gives_each_sheet_in_the_workbook_s_order(tmp_path: Path) -> None:
    data = make_xlsx({"Budget": [["Item", "Cost"], ["Rent", 1200], ["", 30]], "Notes": [["ok"]]})
    assert (
        read_office(write(tmp_path, data), 1000, "xlsx").text
        == "[Sheet: Budget]\nItem\tCost\nRent\t1200\n\t30\n[Sheet: Notes]\nok"
    )


def test_slides_come_in_the_presentation_s_order_and_opendocument_tables_stay_small(
    tmp_path: Path,
) -> None:
    assert (
        read_office(
            write(tmp_path, make_pptx([["Q3", "Revenue up"], ["Thanks"]])), 1000, "pptx"
        ).text
        == "[Slide 1]\nQ3\nRevenue up\n[Slide 2]\nThanks"
    )
    # a row "repeated" a million times, 16,000 empty cells
    odt = make_odt(["Minutes"], rows=[["a", "b"]])
    assert read_office(write(tmp_path, odt), 1000, "odt").text == "Minutes\n[Table: T1]\na\tb"


def test_a_long_document_is_cut_and_the_rest_never_parsed(tmp_path: Path) -> None:
    doc = read_office(write(tmp_path, make_docx([f"line {n}" for n in range(10_000)])), 50, "docx")
    assert (
        doc.text == "\n".join(f"line {n}" for n in range(8))[:50] and 0 < doc.truncated_chars < 100
    )


def test_damaged_locked_empty_and_hostile_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(MediaError, match=r"^the document is damaged or password-protected$"):
        # an encrypted one: OLE, no zip
        read_office(write(tmp_path, b"\xd0\xcf\x11\xe0" + bytes(600)), 100, "docx")
    with pytest.raises(MediaError, match=r"^the document has no text in it$"):
        read_office(write(tmp_path, make_docx([""])), 100, "docx")
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr(
            "word/document.xml", '<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "aaaa">]><d>&a;</d>'
        )
    with pytest.raises(MediaError, match="damaged"):
        read_office(write(tmp_path, out.getvalue()), 100, "docx")
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("word/document.xml", b"<d>" + b" " * (70 * 1024 * 1024) + b"</d>")
    assert len(bomb.getvalue()) < 200_000
    with pytest.raises(MediaError, match=r"^the document unpacks to more than 64 MB$"):
        read_office(write(tmp_path, bomb.getvalue()), 100, "docx")


@pytest.mark.parametrize(
    ("name", "mime", "fmt"),
    [
        ("Plan.docx", DOCX, "docx"),
        ("plan", DOCX, "docx"),
        ("Budget.XLSX", None, "xlsx"),
        ("m.xlsm", None, "xlsx"),
        ("deck.pptx", "application/octet-stream", "pptx"),
        ("a.odt", None, "odt"),
        ("a.ods", None, "ods"),
        ("old.doc", "application/msword", None),
        ("a.zip", "application/zip", None),
    ],
)
def test_which_files_are_office_documents(name: str, mime: str | None, fmt: str | None) -> None:
    assert office_format(name, mime) == fmt
    assert category(Attachment("document", name=name, mime_type=mime)) == (
        "document" if fmt else "other"
    )
    assert is_legacy_office(name, mime) == (name == "old.doc")
