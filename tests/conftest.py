pytest_plugins = [
    "tests.fixtures.kubo",
    "tests.fixtures.nodes",
    "tests.fixtures.inprocess",
    "tests.fixtures.spark",
    "tests.fixtures.netns",
    "tests.fixtures.timing",
]
