"""Attachments: what a photo, a document or a voice note becomes for the model. One message's files
are downloaded through the adapter's own mechanism (download, bounded by media.max_bytes and a
timeout, streamed to disk), pictures prepared for the providers' limits (images, Pillow), documents
read (documents: text-like files, PDFs with pypdf, scanned and marked untrusted; office: Word,
Excel, PowerPoint and OpenDocument files, with the standard library), voice transcribed
(transcribe: an OpenAI-compatible service), all of it put together for one turn (prepare), and a
turn's albums and notices (turns). Pictures, PDFs and office files are parsed in the worker
process (gateway/worker/), never in the daemon; Pillow and pypdf load there.
Imports store, llm's types, config, the worker and the vocabulary; never sessions/ (which calls it).
"""
