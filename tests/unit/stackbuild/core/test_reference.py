"""The image reference: its text, its parts, and its parser against the OCI reference grammar.

Expectations come from the grammar (distribution/reference's regexp.go, written out in the
strategies below) and from Docker's rule for the registry part of a name, not from the code
under test.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stackbuild.core.errors import ImageReferenceInvalid, UsageError
from stackbuild.core.reference import ImageReference

SHA256 = "sha256:" + "a" * 64
SHA512 = "sha512:" + "0123456789abcdef" * 8

# text -> (repository, tag, digest)
VALID = [
    (f"127.0.0.1:5000/a/b:v1@{SHA256}", ("127.0.0.1:5000/a/b", "v1", SHA256)),
    ("127.0.0.1:5000/a/b", ("127.0.0.1:5000/a/b", None, None)),  # a registry port is not a tag
    (f"vllm/vllm-openai@{SHA256}", ("vllm/vllm-openai", None, SHA256)),
    ("vllm/vllm-openai:v0.33.0", ("vllm/vllm-openai", "v0.33.0", None)),
    (
        "ghcr.io/acme/glm53-flash-dflash2-gb300:sm100-gb300-20251130-0123456789ab",
        ("ghcr.io/acme/glm53-flash-dflash2-gb300", "sm100-gb300-20251130-0123456789ab", None),
    ),
    ("localhost/x:latest", ("localhost/x", "latest", None)),
    ("[::1]:5000/a:B_1.x", ("[::1]:5000/a", "B_1.x", None)),
    ("ubuntu", ("ubuntu", None, None)),
    (f"a__b/c---d.e:{'t' * 128}", ("a__b/c---d.e", "t" * 128, None)),
    (f"r.example/x:sha256@{SHA512}", ("r.example/x", "sha256", SHA512)),
]

# text -> words of the reason
INVALID = [
    ("", "at least one component"),
    ("Ubuntu", "must be lowercase"),
    ("ghcr.io/acme/GLM", "must be lowercase"),
    ("a:b c", "invalid reference format"),
    ("a b", "invalid reference format"),
    ("a//b", "invalid reference format"),
    ("a/", "invalid reference format"),
    ("-a", "invalid reference format"),
    ("a..b", "invalid reference format"),
    ("a.b_c/d", "invalid reference format"),  # a first component with a dot is a registry host: no underscore
    ("a:t1:t2", "invalid reference format"),
    ("a:", "invalid reference format"),
    ("a@", "invalid reference format"),
    (f"a@{SHA256}@{SHA256}", "invalid reference format"),
    (f"a:{'t' * 129}", "invalid reference format"),
    ("a@sha256:abc", "invalid reference format"),  # fewer than 32 hex digits
    ("a@sha256:" + "A" * 64, "invalid digest"),  # hex, but not lowercase
    ("a@sha256:" + "a" * 63, "invalid checksum digest length"),
    ("a@md5:" + "a" * 32, "unsupported digest algorithm"),
    ("ghcr.io/" + "a" * 256, "must not be more than 255 characters"),
    ("a\n", "invalid reference format"),
    (f"a:v1@{SHA256}\n", "invalid reference format"),
    (None, "not a string"),
    (5, "not a string"),
]

# repository -> (registry as credentials name it, name inside the registry, API host)
LOCATIONS = [
    ("127.0.0.1:5000/a/b", ("127.0.0.1:5000", "a/b", "127.0.0.1:5000")),
    ("ghcr.io/acme/glm", ("ghcr.io", "acme/glm", "ghcr.io")),
    ("localhost/x", ("localhost", "x", "localhost")),
    ("vllm/vllm-openai", ("docker.io", "vllm/vllm-openai", "registry-1.docker.io")),
    ("ubuntu", ("docker.io", "library/ubuntu", "registry-1.docker.io")),
    ("localhost", ("docker.io", "library/localhost", "registry-1.docker.io")),  # one component is never a host
    ("index.docker.io/a/b", ("docker.io", "a/b", "registry-1.docker.io")),
]


@pytest.mark.parametrize("text,parts", VALID, ids=[t for t, _ in VALID])
def test_parse_and_format(text, parts):
    reference = ImageReference.parse(text)
    assert (reference.repository, reference.tag, reference.digest) == parts
    assert str(reference) == text
    assert f"{reference}" == text


@pytest.mark.parametrize("text,reason", INVALID, ids=[repr(t)[:40] for t, _ in INVALID])
def test_not_a_reference(text, reason):
    with pytest.raises(ImageReferenceInvalid) as caught:
        ImageReference.parse(text)
    assert reason in caught.value.reason
    assert caught.value.message == f"{text!r} is not an image reference ({caught.value.reason})"
    assert "\n" not in caught.value.message and isinstance(caught.value, UsageError) and caught.value.exit_code == 2


@pytest.mark.parametrize("repository,where", LOCATIONS, ids=[r for r, _ in LOCATIONS])
def test_registry_and_name_inside_it(repository, where):
    reference = ImageReference(repository)
    assert (reference.registry, reference.remote_name, reference.api_host) == where


def test_forms():
    full = ImageReference("ghcr.io/acme/glm", "v1", SHA256)
    assert str(full) == f"ghcr.io/acme/glm:v1@{SHA256}"
    assert str(full.by_digest()) == f"ghcr.io/acme/glm@{SHA256}"
    assert str(full.by_tag()) == "ghcr.io/acme/glm:v1"
    assert str(full.by_digest_or_tag()) == f"ghcr.io/acme/glm@{SHA256}"
    assert str(ImageReference("ghcr.io/acme/glm", "v1").by_digest_or_tag()) == "ghcr.io/acme/glm:v1"
    assert str(ImageReference("ghcr.io/acme/glm").by_digest_or_tag()) == "ghcr.io/acme/glm:latest"
    assert str(ImageReference("ghcr.io/acme/glm")) == "ghcr.io/acme/glm"
    with pytest.raises(ValueError):
        ImageReference("ghcr.io/acme/glm", "v1").by_digest()
    with pytest.raises(ValueError):
        ImageReference("ghcr.io/acme/glm", digest=SHA256).by_tag()


def test_registry_api_reference_is_a_digest_or_a_tag():
    assert ImageReference.at("127.0.0.1:5000/a", SHA256) == ImageReference("127.0.0.1:5000/a", digest=SHA256)
    assert ImageReference.at("127.0.0.1:5000/a", SHA512) == ImageReference("127.0.0.1:5000/a", digest=SHA512)
    assert ImageReference.at("127.0.0.1:5000/a", "v1") == ImageReference("127.0.0.1:5000/a", tag="v1")
    # the fallback tag of artifacts referring to a digest is a tag
    assert ImageReference.at("r.example/a", "sha256-" + "a" * 64).tag == "sha256-" + "a" * 64


# --- the grammar, written out (distribution/reference regexp.go) ---------------------------------

ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"
HOST_CHARS = ALNUM + "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
TAG_FIRST = HOST_CHARS + "_"
HEX = "0123456789abcdef"
DIGEST_HEX_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}


@st.composite
def path_components(draw) -> str:
    """[a-z0-9]+ ((\\.|_|__|-+) [a-z0-9]+)*"""
    parts = [draw(st.text(ALNUM, min_size=1, max_size=6))]
    for _ in range(draw(st.integers(0, 3))):
        parts.append(draw(st.sampled_from([".", "_", "__", "-", "--", "---"])))
        parts.append(draw(st.text(ALNUM, min_size=1, max_size=6)))
    return "".join(parts)


@st.composite
def domain_components(draw) -> str:
    """[a-zA-Z0-9] | [a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]"""
    first = draw(st.sampled_from(HOST_CHARS))
    middle = draw(st.text(HOST_CHARS + "-", max_size=6))
    return first + (middle + draw(st.sampled_from(HOST_CHARS)) if middle or draw(st.booleans()) else "")


@st.composite
def domains(draw) -> str:
    host = draw(
        st.one_of(
            st.lists(domain_components(), min_size=1, max_size=3).map(".".join),
            st.sampled_from(["[::1]", "[fe80::1]", "localhost", "127.0.0.1"]),
        )
    )
    port = draw(st.one_of(st.just(""), st.integers(1, 65535).map(lambda p: f":{p}")))
    return host + port


@st.composite
def repositories(draw) -> str:
    components = draw(st.lists(path_components(), min_size=1, max_size=4))
    domain = draw(st.one_of(st.none(), domains()))
    if domain is None and len(components) > 1 and "." in components[0]:
        # Docker reads a first component with a dot as a registry host, which must then be a host name.
        components[0] = components[0].replace(".", "_")
    return f"{domain}/{'/'.join(components)}" if domain else "/".join(components)


tags = st.builds(lambda first, rest: first + rest, st.sampled_from(TAG_FIRST), st.text(TAG_FIRST + ".-", max_size=127))
digests = st.sampled_from(sorted(DIGEST_HEX_LENGTHS)).flatmap(
    lambda algorithm: st.text(HEX, min_size=DIGEST_HEX_LENGTHS[algorithm], max_size=DIGEST_HEX_LENGTHS[algorithm]).map(
        lambda hex_digits: f"{algorithm}:{hex_digits}"
    )
)
references = st.builds(ImageReference, repositories(), st.one_of(st.none(), tags), st.one_of(st.none(), digests))

# Characters no part of a reference may hold (the grammar's alphabets, written out above, exclude them).
NEVER_IN_A_REFERENCE = " \t\n!\"#$%&'()*,;<=>?\\^`{|}~é\u00a0"


@settings(max_examples=300, deadline=None, database=None)
@given(references)
def test_parse_reads_back_what_str_writes(reference):
    assert ImageReference.parse(str(reference)) == reference


@settings(max_examples=300, deadline=None, database=None)
@given(references, st.data())
def test_a_character_outside_the_grammar_anywhere_is_refused(reference, data):
    text = str(reference)
    at = data.draw(st.integers(0, len(text)))
    bad = data.draw(st.sampled_from(NEVER_IN_A_REFERENCE))
    with pytest.raises(ImageReferenceInvalid):
        ImageReference.parse(text[:at] + bad + text[at:])


@settings(max_examples=300, deadline=None, database=None)
@given(
    st.one_of(
        st.text(max_size=80),
        st.text(alphabet=ALNUM + "ABC/:@._-[]+", max_size=80),
        st.builds(
            lambda r, cut, extra: str(r)[:cut] + extra + str(r)[cut:],
            references,
            st.integers(0, 400),
            st.text(alphabet="/:@._-A+[]", max_size=3),
        ),
    )
)
def test_any_text_is_a_reference_or_refused_with_the_project_error(text):
    try:
        reference = ImageReference.parse(text)
    except ImageReferenceInvalid as exc:
        assert exc.exit_code == 2 and exc.text == text
    else:
        assert str(reference) == text
