"""Voice replies: what of an answer is spoken (speech), speech from a provider (tts: an
OpenAI-compatible service or espeak-ng), encoded to OGG/Opus by ffmpeg (encode) in bounded child
processes (process), the three put together (speaker). It knows nothing of chats or delivery:
gateway/delivery/voice.py decides which answers are spoken and sends them. Imports config, errors
and nothing above them.
"""
