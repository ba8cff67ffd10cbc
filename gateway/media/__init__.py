"""Attachments: what a photo, a document or a voice note becomes for the model. One message's files are downloaded
through the adapter's own mechanism (download, bounded by media.max_bytes and a timeout, streamed to disk),
pictures prepared for the providers' limits (images, Pillow), documents read (documents: text-like files, PDFs with
pypdf, scanned and marked untrusted; office: Word, Excel, PowerPoint and OpenDocument files, with the standard
library), voice transcribed (transcribe: an OpenAI-compatible service), all of it put
together for one turn (prepare), and a turn's albums and notices (turns). Pillow and pypdf load on first use.
Imports store, llm's types, config and the vocabulary; never sessions/ (which calls it).
"""
