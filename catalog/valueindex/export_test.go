package valueindex

// FixtureValues exposes the test fixture to the external recall test.
var FixtureValues = fixtureValues
