package valueindex

import (
	"context"
	"hash/fnv"
	"math"
	"strings"
)

var (
	fixFirst = []string{"James", "Mary", "Robert", "Patricia", "John", "Jennifer", "Michael", "Linda", "David",
		"Elizabeth", "William", "Barbara", "Richard", "Susan", "Joseph", "Jessica", "Thomas", "Sarah", "Charles",
		"Karen", "Christopher", "Lisa", "Daniel", "Nancy", "Matthew", "Betty", "Anthony", "Margaret", "Mark",
		"Sandra", "Donald", "Ashley", "Steven", "Kimberly", "Paul", "Emily", "Andrew", "Donna", "Joshua", "Michelle",
		"José", "Zoë", "Siobhán", "Björn", "François"}
	fixLast = []string{"Smith", "Johnson", "Williams", "Brown", "Jones", "Garcia", "Miller", "Davis", "Rodriguez",
		"Martinez", "Hernandez", "Lopez", "Gonzalez", "Wilson", "Anderson", "Thomas", "Taylor", "Moore", "Jackson",
		"Martin", "Lee", "Perez", "Thompson", "White", "Harris", "Sanchez", "Clark", "Ramirez", "Lewis", "Robinson",
		"Walker", "Young", "Allen", "King", "Wright", "Scott", "Torres", "Nguyen", "Hill", "Flores", "O'Brien",
		"McDonald", "Van der Berg", "Müller", "Østergaard"}
	fixCities = []string{"Los Angeles", "New York City", "San Francisco", "St. Louis", "Las Vegas", "Salt Lake City",
		"Kansas City", "Boston", "Chicago", "Houston", "Phoenix", "Philadelphia", "San Antonio", "San Diego", "Dallas",
		"San José", "Austin", "Jacksonville", "Fort Worth", "Columbus", "Charlotte", "Indianapolis", "Seattle",
		"Denver", "Washington", "Nashville", "Oklahoma City", "El Paso", "Portland", "Detroit", "Memphis",
		"Louisville", "Baltimore", "Milwaukee", "Albuquerque", "Tucson", "Fresno", "Sacramento", "Mesa", "Atlanta",
		"Omaha", "Colorado Springs", "Raleigh", "Long Beach", "Virginia Beach", "Miami", "Oakland", "Minneapolis",
		"Tulsa", "Bakersfield", "Wichita", "Arlington", "São Paulo", "Zürich", "Montréal", "Köln", "Malmö"}
	fixCodes    = []string{"LA", "NYC", "SF", "STL", "LV", "SLC", "KC", "DC", "ATL", "CHI"}
	fixProducts = []string{"Coca-Cola 0.5L", "Dr. Pepper (Diet)", "O'Reilly Auto Parts gift card", "M&M's Peanut",
		"Ben & Jerry's Cherry Garcia", "7-Up Lemon-Lime", "Häagen-Dazs Vanilla", "Kellogg's Corn Flakes",
		"Hershey's Milk Chocolate", "Campbell's Tomato Soup", "Pop-Tarts Frosted Strawberry", "Mountain Dew Code Red",
		"Post-it Notes 3x3", "Wi-Fi Extender AC1200", "USB-C Cable 2m", "T-Shirt (XL, Navy)", "Jell-O Strawberry",
		"Kit Kat Chunky", "Red Bull Sugar-Free", "Tylenol Extra-Strength", "Band-Aid Flexible Fabric",
		"Q-tips Cotton Swabs", "Ziploc Freezer Bags (Gallon)", "Lay's Classic Potato Chips", "Reese's Pieces"}
	fixDepts = []string{"Human Resources", "Research and Development", "Information Technology", "Customer Service",
		"Quality Assurance", "Public Relations", "Accounts Payable", "Supply Chain Management", "Legal", "Marketing"}
)

// fixtureValues is a small but confusable value set: 2,025 person names built
// from shared first/last names, cities, city codes, punctuated product names
// and departments.
func fixtureValues() []ColumnValues {
	var names []string
	for _, l := range fixLast {
		for _, f := range fixFirst {
			names = append(names, f+" "+l)
		}
	}
	return []ColumnValues{
		{Schema: "public", Table: "customers", Column: "full_name", Values: names},
		{Schema: "public", Table: "customers", Column: "city", Values: fixCities},
		{Schema: "public", Table: "stores", Column: "city_code", Values: fixCodes},
		{Schema: "sales", Table: "products", Column: "product_name", Values: fixProducts},
		{Schema: "hr", Table: "departments", Column: "dept_name", Values: fixDepts},
	}
}

// hashEmbedder is a deterministic bag-of-3-grams embedder for tests: similar
// spellings get similar vectors. It stands in for a real embedding model.
type hashEmbedder struct {
	dim   int
	calls int
}

func (h *hashEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	h.calls++
	out := make([][]float32, len(texts))
	for i, t := range texts {
		v := make([]float32, h.dim)
		s := " " + strings.ToLower(t) + " "
		for j := 0; j+3 <= len(s); j++ {
			f := fnv.New32a()
			f.Write([]byte(s[j : j+3]))
			v[f.Sum32()%uint32(h.dim)]++
		}
		var n float64
		for _, x := range v {
			n += float64(x * x)
		}
		if n > 0 {
			for k := range v {
				v[k] /= float32(math.Sqrt(n))
			}
		}
		out[i] = v
	}
	return out, nil
}
